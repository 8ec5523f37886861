// The XDP program's guards: access lists and rates in the maps, for xdp
// VIPs (xdpPlane) and for the proxy VIPs whose packets the program sees
// first (guardedPlane).

package reconcile

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
)

// vipACL keeps the guard.ACL of a VIP's allow and deny lists, rebuilt only
// when the lists change: bpf.LB.SetVIP rewrites the acl trie only for a
// new *guard.ACL, so publishes (health, weights) cost no trie walk.
type vipACL struct {
	allow, deny []netip.Prefix
	acl         *guard.ACL
	built       bool
}

// of returns the ACL of vc's lists (nil: none). Callers serialise it.
func (a *vipACL) of(vc *config.VIP) (*guard.ACL, error) {
	if a.built && slices.Equal(a.allow, vc.Allow) && slices.Equal(a.deny, vc.Deny) {
		return a.acl, nil
	}
	acl, err := guard.NewACL(vc.Allow, vc.Deny)
	if err != nil {
		return nil, err
	}
	*a = vipACL{allow: vc.Allow, deny: vc.Deny, acl: acl, built: true}
	return acl, nil
}

// xdpGuard is a proxy VIP's guard-only entry in the XDP program, written
// while the program runs (xdp holds it once loaded): its allow/deny and
// the SYN rate are enforced before the kernel spends a socket, everything
// not dropped passes to the kernel untouched. The vip calls it beside its
// data plane (serve, apply, stop, status).
type xdpGuard struct {
	key l4.VIPKey
	xdp *atomic.Pointer[xdpRuntime]
	log *zap.Logger

	mu      sync.Mutex
	vc      *config.VIP
	x       *xdpRuntime // the program the entry is in; nil: none written
	index   uint32
	acl     vipACL
	stopped bool
}

// newXDPGuard returns the guard of a proxy VIP, nil when the program can
// never guard it (no program in this runtime, a wildcard address). All its
// methods do nothing on nil.
func newXDPGuard(key l4.VIPKey, vc *config.VIP, xdp *atomic.Pointer[xdpRuntime], log *zap.Logger) *xdpGuard {
	if vc.Mode != l4.ModeProxy || xdp == nil || !vc.XDPGuardable() {
		return nil
	}
	return &xdpGuard{key: key, xdp: xdp, log: log, vc: vc}
}

// update takes a reload's settings and writes them (also the first time
// the program runs: a reload that attached it).
func (g *xdpGuard) update(vc *config.VIP) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.vc = vc
	g.mu.Unlock()
	g.write()
}

// write enters or updates the VIP in the program, if it runs. A failure is
// logged: the proxy serves on without the XDP guard (it checks allow/deny
// itself).
func (g *xdpGuard) write() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	x := g.xdp.Load()
	if x == nil || x.held.Load() {
		return
	}
	acl, err := g.acl.of(g.vc)
	if err != nil {
		g.log.Error("xdp guard not written", zap.Error(err))
		return
	}
	if g.x == nil {
		if g.index, err = x.vips.getFor(g.key); err != nil {
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

// clear removes the entry (the VIP's packets reach the kernel as before the
// guard existed) and gives its index back; the guard writes no more.
func (g *xdpGuard) clear() {
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
	x.vips.put(g.index)
}

// fillStatus adds the guards' counters.
func (g *xdpGuard) fillStatus(s *VIPStatus) {
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
			s.XDPGuard = &XDPGuardStatus{ACLDrops: st.ACLDrops, SYNRateDrops: st.SYNRateDrops}
		}
	})
}
