// The capacity guard of drain and disable against a real daemon: refused
// with the numbers (CLI and admin API), --force, the last eligible
// backend, a backend without max_conns counted by its peak, and the same
// warnings from check --diff.

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/testutil"
)

// capacityConf: VIP a over be0 and be1 with max_conns 3 each; VIP p over
// the same servers without caps (its guard counts peaks).
func capacityConf(beKeys ...string) string {
	return newConf().
		vip("a", ":80", `capacity_guard = true`).health(`type = "none"`).backends(2, 7000, append([]string{`max_conns = 3`}, beKeys...)...).
		vip("p", ":81", `capacity_guard = true`).health(`type = "none"`).backends(2, 7000).String()
}

// holdOn opens connections through the VIP's port until each backend
// named in want holds as many as want says, closing any beyond.
func holdOn(t *testing.T, tp *testutil.Topology, port int, want map[string]int) {
	t.Helper()
	for id, n := range want {
		for range n {
			dialBackend(t, tp, port, id) // closed at the test's end
		}
	}
}

func TestDrainCapacityGuard(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startLB(t, tp, capacityConf())
	holdOn(t, tp, 80, map[string]int{"be0": 2, "be1": 2})
	testutil.Eventually(t, 10*time.Second, "2 live on each backend of a", func() bool {
		live := lb.liveFlows(t, "a")
		return live["be0"] == 2 && live["be1"] == 2
	})

	// be0 (max_conns 3, 2 live) has room for 1 of be1's 2: refused, and
	// nothing changes.
	const refused = "refused: drain be1 leaves be0 (max_conns 3, 2 live) to take 2 live connections: 1 of room; --force to drain anyway"
	out, errOut, code := lb.run(t, "drain", "a", "be1")
	if code != 1 || !strings.Contains(errOut, "l4lb drain: "+refused+"\n") {
		t.Fatalf("drain of be1: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1 and %q", code, out, errOut, refused)
	}
	if b := lb.backend(t, "a", "be1"); b.Override != "" {
		t.Fatalf("a refused drain set the override: %+v", b)
	}
	// The admin API refuses the same, 409.
	_, err := admin.Client{Socket: lb.sock}.Do(context.Background(), "POST", admin.BackendPath("a", "be1", "drain"), admin.OverrideRequest{}, nil)
	var se *admin.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusConflict || se.ErrorBody.Error != refused {
		t.Fatalf("POST drain: %v, want 409 %q", err, refused)
	}

	// --force drains, and says what it overrode.
	out = lb.verb(t, "drain", "--force", "a", "be1")
	if !strings.Contains(out, "forced: drain be1 leaves be0") || !strings.Contains(out, "be1 (198.18.1.12:7000) drained") {
		t.Fatalf("drain --force said:\n%s", out)
	}
	if b := lb.backend(t, "a", "be1"); b.Override != "drain" {
		t.Fatalf("after drain --force: %+v", b)
	}
	// be0 is the last eligible backend: a disable is refused, by the API
	// too, even though it has room.
	const last = "refused: disable be0 leaves VIP a with no eligible backend; --force to disable anyway"
	if _, errOut, code := lb.run(t, "disable", "a", "be0"); code != 1 || !strings.Contains(errOut, last) {
		t.Fatalf("disable of the last eligible backend: exit %d\n%s\nwant exit 1 and %q", code, errOut, last)
	}
	_, err = admin.Client{Socket: lb.sock}.Do(context.Background(), "POST", admin.BackendPath("a", "be0", "disable"), nil, nil)
	if !errors.As(err, &se) || se.Status != http.StatusConflict || se.ErrorBody.Error != last {
		t.Fatalf("POST disable: %v, want 409 %q", err, last)
	}
	lb.verb(t, "enable", "a", "be1")

	// VIP p has no caps: its backends' peaks count, as status shows them.
	// Three connections held, round robin: 2 on one backend, 1 on the
	// other, each its peak (nothing closed). The one with 1 cannot go:
	// the other has no room above its peak.
	seen := map[string]int{}
	for range 3 {
		seen[mustDialVIP(t, tp, 81).backend]++
	}
	one, two := "be0", "be1"
	if seen["be0"] == 2 {
		one, two = two, one
	}
	if seen[one] != 1 || seen[two] != 2 {
		t.Fatalf("round robin over p's backends gave %v", seen)
	}
	if b := lb.backend(t, "p", two); b.PeakFlows != 2 || b.LiveFlows != 2 {
		t.Fatalf("status of p's %s: %+v, want peak_flows and live_flows 2", two, b)
	}
	want := fmt.Sprintf("refused: drain %s leaves %s (peak 2, 2 live) to take 1 live connection: 0 of room", one, two)
	if _, errOut, code := lb.run(t, "drain", "p", one); code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("drain of p's %s: exit %d\n%s\nwant exit 1 and %q", one, code, errOut, want)
	}

	// check --diff warns the same for a reload: be1 removed from a, and
	// every backend of p set to weight 0.
	next := filepath.Join(t.TempDir(), "next.toml")
	text := newConf().vip("a", ":80", `capacity_guard = true`).health(`type = "none"`).named("be0", 0, 7000, `max_conns = 3`).
		vip("p", ":81", `capacity_guard = true`).health(`type = "none"`).backends(2, 7000, `weight = 0`).String()
	if err := os.WriteFile(next, []byte(strings.ReplaceAll(text, "@ADMIN@", lb.sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = lb.run(t, "check", next, "--diff")
	for _, want := range []string{
		`vip "a": the reload removes be1 (2 live): leaves be0 (max_conns 3, 2 live) to take 2 live connections: 1 of room`,
		`vip "p": the reload leaves VIP p with no eligible backend`,
	} {
		if code != 0 || !strings.Contains(errOut, "warning: "+next) || !strings.Contains(errOut, want) {
			t.Fatalf("check --diff: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a warning %q", code, out, errOut, want)
		}
	}
}
