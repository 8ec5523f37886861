// The text of `l4lb status` from a given answer: what line 2 says about
// capabilities.

package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/l4/plane"
)

// TestStatusCapabilitiesLine (D31): root's full set is counted on line 2,
// not named; --capabilities names them all; what drop_capabilities keeps
// is named.
func TestStatusCapabilitiesLine(t *testing.T) {
	var full []string
	for i := range 41 {
		full = append(full, fmt.Sprintf("cap_%d", i))
	}
	line2 := func(c plane.CapabilityStatus, view StatusView) string {
		var b strings.Builder
		Status(&b, plane.Status{Process: plane.ProcessStatus{Capabilities: &c}}, view)
		return strings.Split(b.String(), "\n")[1]
	}
	if got := line2(plane.CapabilityStatus{Effective: full}, StatusView{}); got != "capabilities: 41, not dropped (drop_capabilities = false; --capabilities lists them)" {
		t.Errorf("full set: %q", got)
	}
	if got := line2(plane.CapabilityStatus{Effective: full}, StatusView{AllCaps: true}); !strings.HasPrefix(got, "capabilities: 0 1 2 ") || !strings.HasSuffix(got, " 40") {
		t.Errorf("--capabilities: %q", got)
	}
	kept := []string{"cap_net_admin", "cap_net_bind_service", "cap_net_raw"}
	if got := line2(plane.CapabilityStatus{Dropped: true, Effective: kept}, StatusView{}); got != "capabilities: net_admin net_bind_service net_raw (drop_capabilities: the rest dropped, bounding set too)" {
		t.Errorf("dropped: %q", got)
	}
}

// A replica's lag is on its backend line: after "ok", or in the reason of
// the check that failed for it; nothing for a backend without one.
func TestStatusReplicaLag(t *testing.T) {
	secs := 1.24
	var b strings.Builder
	backendTable(&b, "", false, []plane.BackendStatus{
		{ID: "r1", Health: "up", LastCheck: "ok", ReplicaLag: plane.ReplicaLag{Seconds: &secs}},
		{ID: "r2", Health: "down", LastCheck: "replica lag 7.2s > max_lag 5s", Reason: "replica lag 7.2s > max_lag 5s", ReplicaLag: plane.ReplicaLag{Seconds: new(float64)}},
		{ID: "r3", Health: "up", LastCheck: "ok", ReplicaLag: plane.ReplicaLag{Unknown: "no WAL receiver"}},
		{ID: "p", Health: "up", LastCheck: "ok"},
	})
	lines := strings.Split(b.String(), "\n")
	for i, want := range []string{"ok, lag 1.2s", "replica lag 7.2s > max_lag 5s", "ok, lag unknown (no WAL receiver)", "ok"} {
		if !strings.HasSuffix(lines[i+1], "  "+want) {
			t.Errorf("line %q, want it to end with %q", lines[i+1], want)
		}
	}
}
