// The loop against a fake data plane: what it asks of a plane, in which
// order, through l4/plane's contract alone.

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// fakePlane records what the loop asks of it. It implements plane.Plane
// and none of the optional interfaces.
type fakePlane struct {
	outlives bool

	mu     sync.Mutex
	events []string
	snaps  []*snapshot.Snapshot
}

func (p *fakePlane) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, fmt.Sprintf(format, args...))
}

func (p *fakePlane) Serve() { p.note("serve") }
func (p *fakePlane) Publish(s *snapshot.Snapshot) error {
	var ids []string
	for _, m := range s.Members {
		ids = append(ids, string(m.Backend.ID))
	}
	slices.Sort(ids)
	p.note("publish %s", strings.Join(ids, ","))
	p.mu.Lock()
	p.snaps = append(p.snaps, s)
	p.mu.Unlock()
	return nil
}
func (p *fakePlane) StopAccepting()                { p.note("stop") }
func (p *fakePlane) Drain(ctx context.Context) int { p.note("drain"); return 0 }
func (p *fakePlane) Close()                        { p.note("close") }
func (p *fakePlane) ResetWhere(match func(*l4.Backend) bool, why l4.EndReason) int {
	p.note("reset %v", why)
	return 1
}
func (p *fakePlane) CloseSome(b *l4.Backend, n int, reset bool) (int, error) {
	return 0, fmt.Errorf("%w: a fake holds no connection", plane.ErrCannotRebalance)
}
func (p *fakePlane) BackendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	for _, b := range bs {
		p.note("removed %s", b.ID)
		release(b)
	}
}
func (p *fakePlane) BackendDown(b *l4.Backend) { p.note("down %s", b.ID) }
func (p *fakePlane) OutlivesProcess() bool     { return p.outlives }
func (p *fakePlane) FillStatus(s *plane.VIPStatus) {
	s.Active = 7
}
func (p *fakePlane) Explain(q *plane.Query) {
	p.note("explain %d candidates", len(q.Answer.Candidates))
	q.Decided(plane.Ref(q.Snap.Members[0].Backend), "the fake's choice")
}

// took returns the events so far and forgets them.
func (p *fakePlane) took() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.events
	p.events = nil
	return out
}

const fakeVIP = `
[global]
admin_socket = "off"
drain_timeout = "1s"
[[vip]]
name = "v"
listen = "198.18.7.1:80"
idle_timeout = "%s"
  [vip.health]
  type = "none"
  [[vip.backend]]
  name = "a"
  address = "198.18.7.11:80"
%s`

const fakeBackendB = `  [[vip.backend]]
  name = "b"
  address = "198.18.7.12:80"
`

// TestLoopDrivesAFakePlane: the loop opens a VIP's plane, publishes each
// backend set, binds a reload's settings to the plane's own update, asks
// it for resets, status, explain and rebalances, and stops it, all
// through plane.Plane (the fake implements no optional interface, and
// the loop asks for none it lacks).
func TestLoopDrivesAFakePlane(t *testing.T) {
	rt := New(zaptest.NewLogger(t), Options{})
	var fake *fakePlane
	var updates []time.Duration
	rt.openPlane = func(key l4.VIPKey, vc *config.VIP, v *vip) (plane.Plane, func(*config.VIP) error, error) {
		fake = &fakePlane{outlives: vc.Name == "kept"}
		return fake, func(vc *config.VIP) error { updates = append(updates, vc.IdleTimeout); return nil }, nil
	}
	defer rt.Shutdown(context.Background())

	apply(t, rt, fmt.Sprintf(fakeVIP, "1m", fakeBackendB))
	if got := fake.took(); !slices.Equal(got, []string{"publish a,b", "serve"}) {
		t.Fatalf("start: %q, want the first snapshot published, then serve", got)
	}

	if _, err := rt.SetOverride("v", "b", l4.OverrideDisable, "test", false); err != nil {
		t.Fatal(err)
	}
	if got := fake.took(); !slices.Equal(got, []string{"publish a", fmt.Sprintf("reset %v", l4.EndDisabled)}) {
		t.Fatalf("disable: %q", got)
	}

	if st := rt.Status(); len(st.VIPs) != 1 || st.VIPs[0].Active != 7 {
		t.Fatalf("status: %+v, want the plane's count", st.VIPs)
	}
	e, err := rt.Explain("v", netip.MustParseAddrPort("198.18.0.5:4000"))
	if err != nil || e.Because != "the fake's choice" || e.Backend == nil || e.Backend.ID != "a" {
		t.Fatalf("explain: %+v, %v", e, err)
	}
	if got := fake.took(); !slices.Equal(got, []string{"explain 2 candidates"}) {
		t.Fatalf("explain asked: %q", got)
	}
	if _, err := rt.Rebalance("v", RebalanceOptions{By: "test"}); !errors.Is(err, plane.ErrCannotRebalance) {
		t.Fatalf("rebalance: %v, want the plane's refusal", err)
	}

	apply(t, rt, fmt.Sprintf(fakeVIP, "2m", ""))
	if got := fake.took(); !slices.Equal(got, []string{"publish a", "removed b"}) {
		t.Fatalf("reload without b: %q", got)
	}
	if !slices.Equal(updates, []time.Duration{2 * time.Minute}) {
		t.Fatalf("updates: %v, want the reload's idle_timeout through the plane's own update", updates)
	}

	// A reload that removes the VIP stops its plane at once and drains it
	// in the background; the new VIP's plane outlives the process, so
	// Shutdown leaves it as it is.
	old := fake
	apply(t, rt, strings.NewReplacer(`name = "v"`, `name = "kept"`, "198.18.7.1:80", "198.18.7.2:80").Replace(fmt.Sprintf(fakeVIP, "2m", "")))
	testutil.Eventually(t, 10*time.Second, "the removed VIP's plane to drain", func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		return slices.Contains(old.events, "drain")
	})
	if got := old.took(); !slices.Equal(got, []string{"stop", "drain"}) {
		t.Fatalf("removed VIP: %q, want stop, then drain", got)
	}
	fake.took()
	rt.Shutdown(context.Background())
	if got := fake.took(); len(got) != 0 {
		t.Fatalf("shutdown asked %q of a plane that outlives the process", got)
	}
}
