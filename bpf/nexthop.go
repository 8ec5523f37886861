// The nexthops map: each ipip backend's next hop, written by the control
// plane so that a packet needs no bpf_fib_lookup.

package bpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// ErrStaleNextHop is returned by SetNextHop when the backend index no
// longer holds the address the next hop was resolved for.
var ErrStaleNextHop = errors.New("backend index holds another address")

// NextHop is where the program sends an encapsulated packet to one
// backend: the route's egress interface and path MTU and the next hop's
// MAC (the backend's, or its gateway's); the outer source is SetSource's
// (or the flow's in source_prefix4/6) on every path. An ipip packet to a
// backend without one takes bpf_fib_lookup (counted, NextHopFIB).
type NextHop struct {
	DstMAC  net.HardwareAddr // the next hop's MAC
	SrcMAC  net.HardwareAddr // the egress interface's MAC
	IfIndex int              // egress interface: the ingress one means XDP_TX, another a redirect
	// MTU is the path MTU: an outer packet above it is too big, as
	// bpf_fib_lookup would answer (FRAG_NEEDED).
	MTU int
}

// nextHopValue is the nexthops map value of nh.
func nextHopValue(nh NextHop) (lbNexthop, error) {
	v := lbNexthop{Valid: 1, Ifindex: uint32(nh.IfIndex), Mtu: uint32(nh.MTU)}
	switch {
	case len(nh.DstMAC) != 6 || len(nh.SrcMAC) != 6:
		return v, fmt.Errorf("macs %v, %v: want 6 bytes each", nh.DstMAC, nh.SrcMAC)
	case nh.IfIndex <= 0 || nh.MTU <= 0:
		return v, fmt.Errorf("ifindex %d, mtu %d: want both positive", nh.IfIndex, nh.MTU)
	}
	copy(v.Dmac[:], nh.DstMAC)
	copy(v.Smac[:], nh.SrcMAC)
	return v, nil
}

// SetNextHop writes the next hop of backend index i, resolved for the
// backend address addr. It refuses (ErrStaleNextHop) when index i holds
// another address by now: SetBackend and DeleteBackend invalidate the
// next hop of an index whose address changes, under the same lock.
func (lb *LB) SetNextHop(i uint32, addr netip.Addr, nh NextHop) error {
	if err := lb.checkBackendIndex(i); err != nil {
		return fmt.Errorf("set next hop: %w", err)
	}
	v, err := nextHopValue(nh)
	if err != nil {
		return fmt.Errorf("set next hop %d: %w", i, err)
	}
	lb.nhMu.Lock()
	defer lb.nhMu.Unlock()
	var b lbBackend
	if err := lb.objs.Backends.Lookup(i, &b); err != nil {
		return fmt.Errorf("set next hop %d: %w", i, err)
	}
	if b.Family == 0 || b.Addr != addr16(addr.Unmap()) {
		return fmt.Errorf("set next hop %d for %v: %w", i, addr, ErrStaleNextHop)
	}
	if err := lb.objs.Nexthops.Put(i, &v); err != nil {
		return fmt.Errorf("set next hop %d: %w", i, err)
	}
	return nil
}

// ClearNextHop makes backend index i's packets take bpf_fib_lookup again
// (its next hop is unknown or unresolved).
func (lb *LB) ClearNextHop(i uint32) error {
	if err := lb.checkBackendIndex(i); err != nil {
		return fmt.Errorf("clear next hop: %w", err)
	}
	lb.nhMu.Lock()
	defer lb.nhMu.Unlock()
	return lb.clearNextHop(i)
}

// clearNextHop is ClearNextHop under nhMu.
func (lb *LB) clearNextHop(i uint32) error {
	if err := lb.objs.Nexthops.Put(i, &lbNexthop{}); err != nil {
		return fmt.Errorf("clear next hop %d: %w", i, err)
	}
	return nil
}

// NextHopOf reads backend index i's next hop; ok is false when it has
// none (its packets take bpf_fib_lookup).
func (lb *LB) NextHopOf(i uint32) (nh NextHop, ok bool, err error) {
	if err := lb.checkBackendIndex(i); err != nil {
		return NextHop{}, false, fmt.Errorf("next hop: %w", err)
	}
	var v lbNexthop
	if err := lb.objs.Nexthops.Lookup(i, &v); err != nil {
		return NextHop{}, false, fmt.Errorf("next hop %d: %w", i, err)
	}
	if v.Valid == 0 {
		return NextHop{}, false, nil
	}
	return NextHop{DstMAC: net.HardwareAddr(v.Dmac[:]), SrcMAC: net.HardwareAddr(v.Smac[:]),
		IfIndex: int(v.Ifindex), MTU: int(v.Mtu)}, true, nil
}

// Equal reports whether two next hops are the same.
func (nh NextHop) Equal(o NextHop) bool {
	return string(nh.DstMAC) == string(o.DstMAC) && string(nh.SrcMAC) == string(o.SrcMAC) &&
		nh.IfIndex == o.IfIndex && nh.MTU == o.MTU
}

// NextHopFIB returns how many ipip packets took bpf_fib_lookup because
// their backend had no valid next hop (summed over CPUs).
func (lb *LB) NextHopFIB() (uint64, error) {
	var c lbLbCounters
	if err := sumInto(lb.percpu, lb.objs.Counters, 0, &c); err != nil {
		return 0, fmt.Errorf("next hop stats: %w", err)
	}
	return c.NexthopFib, nil
}
