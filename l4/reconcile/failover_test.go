package reconcile

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

// failoverSet is a VIP's config and running backends for the pure
// failover functions: names with a "k" first are backups.
func failoverSet(mode l4.BackupMode, names ...string) (*config.VIP, map[l4.BackendID]*backend) {
	vc := &config.VIP{BackupMode: mode, Health: config.Health{MaxEjected: 50}}
	bs := map[l4.BackendID]*backend{}
	for i, n := range names {
		bc := config.Backend{Name: n, Address: netip.MustParseAddrPort(fmt.Sprintf("198.18.1.%d:5432", 11+i)), Weight: 1, Backup: n[0] == 'k'}
		vc.Backends = append(vc.Backends, bc)
		bs[l4.BackendID(n)] = &backend{b: l4.NewBackend(l4.BackendID(n), bc.Address, nil), weight: 1, conf: bc}
	}
	return vc, bs
}

func served(t *testing.T, bs map[l4.BackendID]*backend, vc *config.VIP, st *stickyState) string {
	t.Helper()
	set, _ := servingSet(bs, vc, st)
	if len(set) != 1 {
		t.Fatalf("sticky serves %d backends, want 1", len(set))
	}
	return string(set[0].b.ID)
}

// TestStickyOrder: backup_mode sticky serves one backend; it stays while
// eligible, a failure moves to the next in the running order, and a
// backend that comes back joins the end of it.
func TestStickyOrder(t *testing.T) {
	vc, bs := failoverSet(l4.BackupSticky, "p1", "p2", "k1")
	st := &stickyState{}
	steps := []struct {
		down  []string // down after this step
		serve string
	}{
		{nil, "p1"},
		{[]string{"p1"}, "p2"},
		{nil, "p2"},            // p1 back: it joins the end (p2, k1, p1); p2 stays
		{[]string{"p2"}, "k1"}, // next in order is k1, not p1
		{[]string{"p2", "k1"}, "p1"},
		{nil, "p1"},            // both back: p1 stays
		{[]string{"p1"}, "p2"}, // order now p1, p2, k1 (p2 and k1 came back in that order)
	}
	for i, s := range steps {
		for _, b := range bs {
			b.health = l4.HealthUp
		}
		for _, id := range s.down {
			bs[l4.BackendID(id)].health = l4.HealthDown
		}
		if got := served(t, bs, vc, st); got != s.serve {
			t.Fatalf("step %d (down %v): serves %s, want %s (order %v)", i, s.down, got, s.serve, st.order)
		}
	}
}

// TestCapEjections: passive marks take out at most max_ejected percent
// (rounded down), the earliest first; a later mark is kept in until an
// earlier one ends; active-check downs are not capped.
func TestCapEjections(t *testing.T) {
	vc, bs := failoverSet(l4.BackupFirst, "a", "b", "c", "d")
	now := time.Now()
	mark := func(id string, at time.Duration, passive bool) {
		b := bs[l4.BackendID(id)]
		b.health, b.passive, b.downAt = l4.HealthDown, passive, now.Add(at)
	}
	kept := func() (out []string) {
		capEjections(bs, vc)
		for _, id := range []string{"a", "b", "c", "d"} {
			if bs[l4.BackendID(id)].ejectKept {
				out = append(out, id)
			}
		}
		return out
	}
	mark("b", 2*time.Second, true)
	mark("a", time.Second, true)
	mark("c", 3*time.Second, true)
	if got := fmt.Sprint(kept()); got != "[c]" { // 50% of 4: a and b out, c kept
		t.Fatalf("kept %s, want [c]", got)
	}
	if bs["c"].down() || !bs["c"].eligible() {
		t.Fatal("a kept backend must be eligible")
	}
	bs["a"].health, bs["a"].passive = l4.HealthUp, false
	if got := fmt.Sprint(kept()); got != "[]" {
		t.Fatalf("an earlier mark ended: kept %s, want none", got)
	}
	mark("d", 0, false) // an active check's down counts as none of the passive ones
	if got := fmt.Sprint(kept()); got != "[]" {
		t.Fatalf("active down: kept %s, want none", got)
	}
	vc.Health.MaxEjected = 100
	mark("a", 4*time.Second, true)
	if got := fmt.Sprint(kept()); got != "[]" {
		t.Fatalf("max_ejected 100: kept %s, want none", got)
	}
	vc.Health.MaxEjected = 10 // 10% of 4 rounds to 0: at least one all the same
	if got := fmt.Sprint(kept()); got != "[a c]" {
		t.Fatalf("max_ejected 10: kept %s, want [a c] (b, the earliest, out)", got)
	}
	vc.Health.MaxEjected = 0
	if got := fmt.Sprint(kept()); got != "[a b c]" {
		t.Fatalf("max_ejected 0: kept %s, want every passive mark", got)
	}
}

// TestPanicSet: with panic_mode, a VIP that health left without a
// backend serves the ones down by health (primaries first); backends an
// operator took out, or with weight 0, stay out; without it, none.
func TestPanicSet(t *testing.T) {
	vc, bs := failoverSet(l4.BackupFirst, "p1", "p2", "k1")
	for _, b := range bs {
		b.health = l4.HealthDown
	}
	bs["p2"].override.state = l4.OverrideDisable
	ms, serving := effectiveMembers(bs, vc, nil, time.Now())
	if len(ms) != 0 || serving != servingNone {
		t.Fatalf("panic_mode off: %d members, serving %q; want none", len(ms), serving)
	}
	vc.Health.PanicMode = true
	ms, serving = effectiveMembers(bs, vc, nil, time.Now())
	if len(ms) != 1 || ms[0].Backend.ID != "p1" || serving != servingPanic {
		t.Fatalf("panic_mode on: %v, serving %q; want p1 only (p2 disabled), panic", ms, serving)
	}
	bs["k1"].health = l4.HealthUp
	if _, serving = effectiveMembers(bs, vc, nil, time.Now()); serving != servingBackups {
		t.Fatalf("a backup up: serving %q, want backups (no panic)", serving)
	}
}
