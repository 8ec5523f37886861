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
