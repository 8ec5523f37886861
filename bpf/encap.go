// Encapsulation settings: per-flow outer sources and the GUE port.

package bpf

import (
	"fmt"
	"net/netip"
)

// DefaultGUEPort is the UDP port of GUE when none is configured: Katran's.
const DefaultGUEPort = 6080

// Encap is how encapsulated packets are built beyond SetSource.
type Encap struct {
	// Prefix4, when valid, is [xdp] source_prefix4: each flow's outer
	// IPv4 source is an address of it chosen by the flow's hash (so a
	// backend's NIC spreads flows over its receive queues), instead of
	// the balancer's own address. The balancer need not have these
	// addresses; nothing ever answers to them.
	Prefix4 netip.Prefix
	// Prefix6 is the same for IPv6 outer headers; /64 or longer (the
	// hash fills at most the low 64 bits).
	Prefix6 netip.Prefix
	// GUEPort is the UDP destination port of forward = gue (0:
	// DefaultGUEPort).
	GUEPort uint16
}

// SetEncap writes e into the config entry: every packet from then on
// uses it (a flow may change its outer source once, at that moment).
func (lb *LB) SetEncap(e Encap) error {
	lb.cfgMu.Lock()
	defer lb.cfgMu.Unlock()
	var c lbLbConfig
	if err := lb.objs.Config.Lookup(uint32(0), &c); err != nil {
		return fmt.Errorf("set encap: %w", err)
	}
	if err := encapInto(&c, e); err != nil {
		return fmt.Errorf("set encap: %w", err)
	}
	if err := lb.objs.Config.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("set encap: %w", err)
	}
	return nil
}

// encapInto fills c's encapsulation fields from e.
func encapInto(c *lbLbConfig, e Encap) error {
	c.Prefix4, c.Mask4, c.Prefix6, c.Mask6, c.EncapFlags = [4]byte{}, [4]byte{}, [16]byte{}, [8]byte{}, 0
	if e.Prefix4.IsValid() {
		if !e.Prefix4.Addr().Is4() {
			return fmt.Errorf("source prefix %v is not IPv4", e.Prefix4)
		}
		net, mask := prefixAndHostMask(e.Prefix4)
		copy(c.Prefix4[:], net)
		copy(c.Mask4[:], mask)
		c.EncapFlags |= uint8(lbEncapFlagENCAP_PREFIX4)
	}
	if e.Prefix6.IsValid() {
		if !e.Prefix6.Addr().Is6() || e.Prefix6.Addr().Is4In6() || e.Prefix6.Bits() < 64 {
			return fmt.Errorf("source prefix %v: want an IPv6 prefix of /64 or longer", e.Prefix6)
		}
		net, mask := prefixAndHostMask(e.Prefix6)
		copy(c.Prefix6[:], net)
		copy(c.Mask6[:], mask[8:])
		c.EncapFlags |= uint8(lbEncapFlagENCAP_PREFIX6)
	}
	port := e.GUEPort
	if port == 0 {
		port = DefaultGUEPort
	}
	c.GuePort = htons(port)
	return nil
}

// prefixAndHostMask returns p's network address and its host bits set, in
// network order.
func prefixAndHostMask(p netip.Prefix) (network, host []byte) {
	network = p.Masked().Addr().AsSlice()
	host = make([]byte, len(network))
	for i := range host {
		bits := p.Bits() - 8*i // network bits in this byte
		switch {
		case bits <= 0:
			host[i] = 0xff
		case bits < 8:
			host[i] = 0xff >> bits
		}
	}
	return network, host
}
