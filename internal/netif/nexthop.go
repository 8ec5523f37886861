// nexthop.go: where frames toward a backend go now, everything an XDP program needs to send them without a FIB lookup.

package netif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// NextHop is how the kernel would send a packet to one destination now:
// out of which link, from which MAC to which MAC, and the path MTU.
type NextHop struct {
	Dst     netip.Addr // the destination asked about
	Via     netip.Addr // the gateway, or Dst itself on a connected segment
	IfIndex int        // egress link
	SrcMAC  net.HardwareAddr
	DstMAC  net.HardwareAddr // the neighbour entry of Via, in a state the kernel uses
	MTU     int              // Route.MTU
}

// NextHops resolves each of addrs as the kernel would now: the route, the
// egress link's MAC and the next hop's neighbour entry (asked afresh, not
// from the last Ensure, so that a route that moved is seen at once). An
// address without a route, local to this host, on a link without a MAC,
// or whose next hop has no valid neighbour entry (not yet resolved, or
// FAILED) is missing from the result, with its reason in the error (the
// others are still resolved). It costs one route lookup per address and
// one neighbour dump per link and family.
func (n *Neighbors) NextHops(addrs []netip.Addr) (map[netip.Addr]NextHop, error) {
	out := make(map[netip.Addr]NextHop, len(addrs))
	t := newNeighTable(n.h)
	links := map[int]net.HardwareAddr{}
	var errs []error
	for _, a := range addrs {
		nh, err := n.nextHop(t, links, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[a] = nh
	}
	return out, errors.Join(errs...)
}

// nextHop resolves one address (links caches the egress links' MACs).
func (n *Neighbors) nextHop(t *neighTable, links map[int]net.HardwareAddr, a netip.Addr) (NextHop, error) {
	r, err := n.h.RouteTo(a)
	if err != nil {
		return NextHop{}, err
	}
	if r.Local {
		return NextHop{}, fmt.Errorf("next hop of %s: %w", a, ErrLocal)
	}
	src, ok := links[r.IfIndex]
	if !ok {
		ifc, err := n.h.LookupIndex(r.IfIndex)
		if err != nil {
			return NextHop{}, fmt.Errorf("next hop of %s: %w", a, err)
		}
		src, links[r.IfIndex] = ifc.MAC, ifc.MAC
	}
	if len(src) != 6 {
		return NextHop{}, fmt.Errorf("next hop of %s: %s has no Ethernet MAC", a, r.IfName)
	}
	k := neighKey{r.IfIndex, r.NextHop()}
	e, err := t.get(k)
	if err != nil {
		return NextHop{}, err
	}
	var dst net.HardwareAddr
	if e != nil {
		dst, ok = validMAC(e)
	}
	if e == nil || !ok || len(dst) != 6 {
		return NextHop{}, fmt.Errorf("next hop of %s: %s: %w", a, k, ErrUnresolved)
	}
	return NextHop{Dst: r.Dst, Via: k.addr, IfIndex: r.IfIndex, SrcMAC: src, DstMAC: dst, MTU: r.MTU}, nil
}
