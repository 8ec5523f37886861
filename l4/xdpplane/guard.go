// The XDP program's guards: access lists and rates in the maps, for xdp
// VIPs (Plane) and for the proxy VIPs whose packets the program sees
// first (Guard).

package xdpplane

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/l4lb/l4lb/l4/plane"
)

// vipACL keeps the guard.ACL of a VIP's allow and deny lists, rebuilt only
// when the lists change: bpf.LB.SetVIP rewrites the acl trie only for a
// new *guard.ACL, so publishes (health, weights) cost no trie walk.
type vipACL struct {
	allow, deny []netip.Prefix
	acl         *guard.ACL
	built       bool
}

// of returns the ACL of the lists (nil: none). Callers serialise it.
func (a *vipACL) of(allow, deny []netip.Prefix) (*guard.ACL, error) {
	if a.built && slices.Equal(a.allow, allow) && slices.Equal(a.deny, deny) {
		return a.acl, nil
	}
	acl, err := guard.NewACL(allow, deny)
	if err != nil {
		return nil, err
	}
	*a = vipACL{allow: allow, deny: deny, acl: acl, built: true}
	return acl, nil
}

// GuardOptions are a proxy VIP's lists, for its guard.
type GuardOptions struct {
	Allow, Deny []netip.Prefix
}

// Guard is a proxy VIP's guard-only entry in the XDP program, written
// while the program runs (xdp holds it once loaded): its allow/deny and
// the SYN rate are enforced before the kernel spends a socket, everything
// not dropped passes to the kernel untouched. The control loop calls it
// beside the VIP's data plane (serve, apply, stop, status). A nil Guard
// does nothing.
type Guard struct {
	key l4.VIPKey
	xdp *atomic.Pointer[Program]
	log *zap.Logger

	mu      sync.Mutex
	vc      GuardOptions
	x       *Program // the program the entry is in; nil: none written
	index   uint32
	acl     vipACL
	stopped bool
	// waiting: the VIP's old xdp plane still owns its entry (a mode
	// change drains); the guard writes once it is gone (Wait).
	waiting bool
}

// NewGuard returns the guard of the proxy VIP at key (a concrete
// address): it writes into the program xdp holds, once one runs.
func NewGuard(key l4.VIPKey, o GuardOptions, xdp *atomic.Pointer[Program], log *zap.Logger) *Guard {
	return &Guard{key: key, xdp: xdp, log: log, vc: o}
}

// Update takes a reload's lists and writes them (also the first time the
// program runs: a reload that attached it).
func (g *Guard) Update(vc GuardOptions) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.vc = vc
	g.mu.Unlock()
	g.Write()
}

// Write enters or updates the VIP in the program, if it runs. A failure is
// logged: the proxy serves on without the XDP guard (it checks allow/deny
// itself).
func (g *Guard) Write() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || g.waiting {
		return
	}
	x := g.xdp.Load()
	if x == nil || x.held.Load() {
		return
	}
	acl, err := g.acl.of(g.vc.Allow, g.vc.Deny)
	if err != nil {
		g.log.Error("xdp guard not written", zap.Error(err))
		return
	}
	if g.x == nil {
		if g.index, err = x.vips.GetFor(g.key); err != nil {
			g.log.Warn("xdp guard not written: no VIP index left", zap.Error(err))
			return
		}
		g.x = x
	}
	x.using(func() {
		err = x.lb.SetVIP(g.key, bpf.VIPEntry{Index: g.index, GuardOnly: true, ACL: acl})
	})
	if err != nil {
		g.log.Warn("xdp guard not written: the proxy checks allow/deny itself", zap.Error(err))
	}
}

// Clear removes the entry (the VIP's packets reach the kernel as before the
// guard existed) and gives its index back; the guard writes no more.
func (g *Guard) Clear() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	x := g.x
	if x == nil {
		return
	}
	g.x = nil
	if x.held.Load() {
		return // another l4lb owns the pinned maps now (an upgrade): its entry stays
	}
	x.using(func() {
		if err := x.lb.DeleteVIP(g.key); err != nil {
			g.log.Warn("xdp guard not removed", zap.Error(err))
		}
	})
	x.vips.Put(g.index)
}

// Wait keeps the guard from writing (true) while the VIP's old xdp plane
// owns the VIP's entry in the program (a mode change from xdp drains), or
// writes it (false) once that plane is gone.
func (g *Guard) Wait(wait bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.waiting = wait
	g.mu.Unlock()
	if !wait {
		g.Write()
	}
}

// Yield gives the guard's index back and writes no more, leaving the
// VIP's entry in the program to the VIP's new xdp plane, which wrote it
// over the guard's (a mode change to xdp).
func (g *Guard) Yield() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	if g.x != nil {
		g.x.vips.Put(g.index)
		g.x = nil
	}
}

// FillStatus adds the guard's counters.
func (g *Guard) FillStatus(s *plane.VIPStatus) {
	if g == nil {
		return
	}
	g.mu.Lock()
	x, index := g.x, g.index
	g.mu.Unlock()
	if x == nil {
		return
	}
	x.using(func() {
		if st, err := x.lb.VIPStats(index); err == nil {
			s.XDPGuard = &plane.XDPGuardStatus{ACLDrops: st.ACLDrops, SYNRateDrops: st.SYNRateDrops}
		}
	})
}
