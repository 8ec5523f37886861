// mac.go: a backend's own MAC for L2 forwarding, resolving it if needed within a deadline.

package netif

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// pollInterval is how often MAC looks at the neighbour table while the
// kernel resolves; ARP on a LAN answers in well under a millisecond, a
// retry takes a second.
const pollInterval = 5 * time.Millisecond

// MAC returns the MAC of addr, a backend on a directly connected segment
// (L2 forwarding rewrites the destination MAC to it). When the neighbour
// table has no usable entry it asks the kernel to resolve one (one
// ARP/ND exchange, no packet to the backend itself) and waits until it is
// resolved, the kernel gives up (ErrUnresolved) or ctx ends. A backend
// behind a gateway gives ErrNotOnLink, a local address ErrLocal. MAC does
// not keep the entry fresh: give the backend to Neighbors.Ensure too.
func (h *Handle) MAC(ctx context.Context, addr netip.Addr) (net.HardwareAddr, error) {
	r, err := h.RouteTo(addr)
	if err != nil {
		return nil, err
	}
	if r.Local {
		return nil, fmt.Errorf("mac of %s: %w", addr, ErrLocal)
	}
	if !r.OnLink() {
		return nil, fmt.Errorf("mac of %s: reached via %s: %w", addr, r.Gateway, ErrNotOnLink)
	}
	k := neighKey{r.IfIndex, r.Dst}
	e, err := newNeighTable(h).get(k)
	if err != nil {
		return nil, err
	}
	if e != nil {
		if mac, ok := validMAC(e); ok {
			return mac, nil
		}
	}
	if err := h.solicit(k, e); err != nil {
		return nil, err
	}
	return h.waitResolved(ctx, k, r.IfName)
}

// solicit makes the kernel start resolving k now (NTF_USE), keeping the
// managed flag of an entry that has it: a plain NTF_USE update would
// clear it.
func (h *Handle) solicit(k neighKey, e *netlink.Neigh) error {
	n := &netlink.Neigh{LinkIndex: k.ifindex, IP: k.addr.AsSlice(), Flags: netlink.NTF_USE}
	if e != nil && isManaged(e) {
		n.FlagsExt = netlink.NTF_EXT_MANAGED
	}
	if err := h.nl.NeighSet(n); err != nil {
		return fmt.Errorf("resolve neighbour %s: %w", k, err)
	}
	return nil
}

// waitResolved polls k until it has a usable MAC, turns FAILED (the
// kernel's probes went unanswered) or ctx ends.
func (h *Handle) waitResolved(ctx context.Context, k neighKey, ifname string) (net.HardwareAddr, error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		e, err := newNeighTable(h).get(k)
		if err != nil {
			return nil, err
		}
		if e != nil {
			if mac, ok := validMAC(e); ok {
				return mac, nil
			}
			if e.State&netlink.NUD_FAILED != 0 {
				return nil, fmt.Errorf("neighbour %s on %s: no answer: %w", k.addr, ifname, ErrUnresolved)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("neighbour %s on %s: %w: %w", k.addr, ifname, ErrUnresolved, ctx.Err())
		case <-tick.C:
		}
	}
}
