// The next hops of ipip backends: the loop writes each backend's route
// and neighbour into the nexthops map, so that the program needs no
// bpf_fib_lookup per packet, and follows route, neighbour and link changes.

package xdpplane

import (
	"errors"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/bpf"
)

// changeSettle is how long the loop waits after a route, neighbour or link
// change before it reads them again, so that a burst of changes (a link
// flap flushes every neighbour) costs one pass.
const changeSettle = 50 * time.Millisecond

// ipipBackends returns the encapsulated (ipip and gue) backends of every
// plane by index.
func ipipBackends(planes []*Plane) map[uint32]netip.Addr {
	out := map[uint32]netip.Addr{}
	for _, p := range planes {
		if !p.conf().Forward.Encapsulates() {
			continue
		}
		p.mu.Lock()
		for i, xb := range p.backends {
			out[i] = xb.b.Addr.Addr().Unmap()
		}
		p.mu.Unlock()
	}
	return out
}

// syncNextHops brings the nexthops map in step with the kernel's routes
// and neighbours for every ipip backend: an entry that changed is
// rewritten, one that no longer resolves is cleared (its packets take
// bpf_fib_lookup, which answers as before: no_neigh, drop_fib), and so are
// those of indexes that are no ipip backend any more. On the loop only.
func (x *Program) syncNextHops(planes []*Plane) {
	want := ipipBackends(planes)
	addrs := make([]netip.Addr, 0, len(want))
	for _, a := range want {
		addrs = append(addrs, a)
	}
	hops, err := x.neigh.NextHops(addrs)
	if err != nil {
		x.log.Debug("xdp: some ipip backends have no next hop yet: their packets take the FIB lookup", zap.Error(err))
	}
	for i, a := range want {
		nh, ok := hops[a]
		x.writeNextHop(i, a, bpf.NextHop{DstMAC: nh.DstMAC, SrcMAC: nh.SrcMAC, IfIndex: nh.IfIndex, MTU: nh.MTU}, ok)
	}
	for i := range x.nhIndexes {
		if _, ok := want[i]; !ok {
			x.clearNextHop(i)
		}
	}
}

// writeNextHop makes index i's entry e (ok) or none (!ok), writing only
// what differs from the map.
func (x *Program) writeNextHop(i uint32, a netip.Addr, e bpf.NextHop, ok bool) {
	cur, has, err := x.lb.NextHopOf(i)
	if err != nil {
		x.log.Warn("xdp: reading a backend's next hop failed", zap.Uint32("index", i), zap.Error(err))
		return
	}
	if !ok {
		if has {
			x.clearNextHop(i)
		}
		return
	}
	if has && cur.Equal(e) {
		x.nhIndexes[i] = struct{}{}
		return
	}
	err = x.lb.SetNextHop(i, a, e)
	switch {
	case errors.Is(err, bpf.ErrStaleNextHop):
		// The index changed hands since the planes were read: the
		// next pass writes the new backend's.
	case err != nil:
		x.log.Warn("xdp: writing a backend's next hop failed (its packets take the FIB lookup)", zap.Stringer("backend", a), zap.Error(err))
	default:
		x.nhIndexes[i] = struct{}{}
	}
}

// clearNextHop removes index i's entry.
func (x *Program) clearNextHop(i uint32) {
	if err := x.lb.ClearNextHop(i); err != nil {
		x.log.Warn("xdp: clearing a backend's next hop failed", zap.Uint32("index", i), zap.Error(err))
		return
	}
	delete(x.nhIndexes, i)
}
