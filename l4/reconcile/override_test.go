package reconcile

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

const overrideVIP = `
[global]
admin_socket = "off"
[[vip]]
name = "a"
listen = "%s"
  [vip.health]
  type = "none"
  [[vip.backend]]
  name = "s1"
  address = "%s"
  [[vip.backend]]
  name = "s2"
  address = "%s"
  weight = %d
`

// names dials n times and counts the backends' names.
func names(t *testing.T, rt *Runtime, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	addr := netip.MustParseAddrPort(rt.Status().VIPs[0].Listen)
	for range n {
		name, err := dialName(addr)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	return seen
}

func TestOverrideLifecycle(t *testing.T) {
	s1, s2 := startNamed(t, "s1"), startNamed(t, "s2")
	vipAddr := testutil.FreeTCPAddr(t)
	conf := func(w2 int) string { return fmt.Sprintf(overrideVIP, vipAddr, s1.addr, s2.addr, w2) }
	rt := startRuntime(t, conf(100))
	v := rt.vipNamed("a")
	b2 := v.backendByID("s2")

	// Drain: no new flows, pinned flows may stay (Eligible).
	res, err := rt.SetOverride("a", "s2", l4.OverrideDrain, "alice: maintenance", false)
	if err != nil || res.Previous != "none" || res.Override != "drain" || res.Address != s2.addr.String() {
		t.Fatalf("drain: %+v %v", res, err)
	}
	if seen := names(t, rt, 10); seen["s2"] != 0 {
		t.Fatalf("drained backend got new flows: %v", seen)
	}
	if !b2.Eligible() {
		t.Fatal("a drained backend's pinned flows must stay (Eligible)")
	}
	st, _ := backendStatus(rt, "a", "s2")
	if st.Override != "drain" || st.OverrideBy != "alice: maintenance" || st.OverrideSince.IsZero() || st.EffectiveWeight != 0 {
		t.Fatalf("status: %+v", st)
	}

	// A reload that leaves s2 as it was keeps the drain (the line it sits
	// on may move).
	apply(t, rt, "# a comment moves every line\n"+conf(100))
	if seen := names(t, rt, 10); seen["s2"] != 0 {
		t.Fatalf("drain lost by an unchanged reload: %v", seen)
	}

	// Disable: pinned flows must move too.
	if _, err := rt.SetOverride("a", s2.addr.String(), l4.OverrideDisable, "bob", false); err != nil {
		t.Fatal(err)
	}
	if b2.Eligible() {
		t.Fatal("a disabled backend still holds its pinned flows")
	}

	// A reload that changes s2 (its weight) clears the override.
	apply(t, rt, conf(50))
	if st, _ := backendStatus(rt, "a", "s2"); st.Override != "" || !b2.Eligible() {
		t.Fatalf("override after s2 changed: %+v", st)
	}
	if seen := names(t, rt, 12); seen["s2"] == 0 {
		t.Fatalf("s2 gets no flows after its override was cleared: %v", seen)
	}

	// Enable clears it too.
	if _, err := rt.SetOverride("a", "s1", l4.OverrideDrain, "x", false); err != nil {
		t.Fatal(err)
	}
	if res, err := rt.SetOverride("a", "s1", l4.OverrideNone, "x", false); err != nil || res.Previous != "drain" {
		t.Fatalf("enable: %+v %v", res, err)
	}
	if seen := names(t, rt, 12); seen["s1"] == 0 {
		t.Fatalf("s1 after enable: %v", seen)
	}
}

func TestOverrideNamesABackend(t *testing.T) {
	s1, s2 := startNamed(t, "s1"), startNamed(t, "s2")
	rt := startRuntime(t, fmt.Sprintf(overrideVIP, testutil.FreeTCPAddr(t), s1.addr, s2.addr, 100))
	for _, tc := range []struct {
		vip, ref string
		want     error
		msg      string
	}{
		{"a", "s1", nil, ""},
		{"a", s1.addr.String(), nil, ""},
		{"nosuch", "s1", ErrNoVIP, `vip "nosuch"`},
		{"a", "s3", ErrNoBackend, "(backends: s1, s2)"},
		{"a", "198.18.9.9:1", ErrNoBackend, ""},
		// Both servers listen on 127.0.0.1: the IP alone is ambiguous.
		{"a", s1.addr.Addr().String(), ErrAmbiguous, fmt.Sprintf(`"127.0.0.1" names 2 backends: s1 (%s, by IP), s2 (%s, by IP)`, s1.addr, s2.addr)},
	} {
		_, err := rt.SetOverride(tc.vip, tc.ref, l4.OverrideDrain, "t", false)
		if !errors.Is(err, tc.want) || (err != nil && !strings.Contains(err.Error(), tc.msg)) {
			t.Errorf("SetOverride(%q, %q): %v, want %v with %q", tc.vip, tc.ref, err, tc.want, tc.msg)
		}
	}
}

// A backend named with another backend's IP (D5): config refuses such a
// name, and the lookup refuses the ambiguity too, for a config that did
// not come through config's checks. Before, "127.0.0.1" matched the
// backend named so and drained it, while the operator meant the backend
// at 127.0.0.1.
func TestOverrideRefusesANameThatIsAnotherBackendsIP(t *testing.T) {
	s1, s2 := startNamed(t, "s1"), startNamed(t, "s2")
	rt := startRuntime(t, fmt.Sprintf(overrideVIP, testutil.FreeTCPAddr(t), s1.addr, s2.addr, 100))
	cfg := parse(t, fmt.Sprintf(overrideVIP, rt.Status().VIPs[0].Listen, "198.18.9.1:5432", s2.addr, 100))
	cfg.VIPs[0].Backends[0].Name = s2.addr.Addr().String() // "127.0.0.1", at 198.18.9.1
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	_, err := rt.SetOverride("a", "127.0.0.1", l4.OverrideDisable, "t", false)
	want := fmt.Sprintf(`"127.0.0.1" names 2 backends: 127.0.0.1 (198.18.9.1:5432, by name), s2 (%s, by IP); name one by its address:port`, s2.addr)
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), want) {
		t.Fatalf("SetOverride by an ambiguous IP: %v, want %v with %q", err, ErrAmbiguous, want)
	}
	for _, id := range []string{"127.0.0.1", "s2"} {
		if st, _ := backendStatus(rt, "a", id); st.Override != "" {
			t.Fatalf("backend %s got override %q from a refused command", id, st.Override)
		}
	}
	// Each is reachable by its address:port.
	for ref, id := range map[string]string{"198.18.9.1:5432": "127.0.0.1", s2.addr.String(): "s2"} {
		if res, err := rt.SetOverride("a", ref, l4.OverrideDrain, "t", true); err != nil || res.Backend != id {
			t.Fatalf("SetOverride(%q): %+v %v, want backend %s", ref, res, err, id)
		}
	}
}

// TestOverrideNoOp (D34): enabling a backend that has no override, or
// draining a drained one, changes nothing: the result says so, no
// override is recorded or logged, and the first drain's setter stays.
func TestOverrideNoOp(t *testing.T) {
	s1, s2 := startNamed(t, "s1"), startNamed(t, "s2")
	rt, logs := observedRuntime(t, fmt.Sprintf(overrideVIP, testutil.FreeTCPAddr(t), s1.addr, s2.addr, 100))
	res, err := rt.SetOverride("a", "s1", l4.OverrideNone, "alice", false)
	if err != nil || !res.Unchanged || res.Previous != "none" || res.By != "" {
		t.Fatalf("enable of a backend with no override: %+v %v", res, err)
	}
	if st, _ := backendStatus(rt, "a", "s1"); st.Override != "" || st.OverrideBy != "" || !st.OverrideSince.IsZero() {
		t.Fatalf("status after a no-op enable: %+v", st)
	}
	if n := logs.FilterMessage("backend override set").Len(); n != 0 {
		t.Fatalf("a no-op enable logged as an override: %v", logs.All())
	}
	if res, err := rt.SetOverride("a", "s1", l4.OverrideDrain, "bob", false); err != nil || res.Unchanged {
		t.Fatalf("drain: %+v %v", res, err)
	}
	res, err = rt.SetOverride("a", "s1", l4.OverrideDrain, "carol", false)
	if err != nil || !res.Unchanged || res.By != "bob" {
		t.Fatalf("second drain: %+v %v", res, err)
	}
	if st, _ := backendStatus(rt, "a", "s1"); st.OverrideBy != "bob" {
		t.Fatalf("the second drain replaced who set it: %+v", st)
	}
	if n := logs.FilterMessage("backend override set").Len(); n != 1 {
		t.Fatalf("%d override lines, want the one real drain", n)
	}
}
