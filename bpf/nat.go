// The NAT settings of forward = "nat" VIPs and reads of their mappings.

package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// NATClosedTimeout is how long a TCP mapping that saw a FIN or RST keeps
// its port after its last packet: the backend's TIME_WAIT (60 s on Linux)
// is over before the port goes to a new flow.
const NATClosedTimeout = 60 * time.Second

// NATConfig are the NAT settings of the program ([xdp] nat_*).
type NATConfig struct {
	// Enabled turns on the reply path: packets that are not for a VIP are
	// looked up as replies to a NAT mapping only while it is set (some
	// VIP has forward = nat).
	Enabled bool
	// Source4 and Source6 are the NAT addresses (the balancer's own); a
	// zero Addr leaves that family without NAT (drop_no_source).
	Source4, Source6 netip.Addr
	// PortLo..PortHi are the NAT ports (1 <= PortLo <= PortHi).
	PortLo, PortHi uint16
	// TCPTimeout and UDPTimeout are how long a mapping may idle before a
	// new flow may take its port; a TCP mapping that saw a FIN or RST
	// keeps it NATClosedTimeout.
	TCPTimeout, UDPTimeout time.Duration
}

// natConfigValue is the nat_cfg global of c.
func natConfigValue(c NATConfig) (lbNatConfig, error) {
	v := lbNatConfig{PortLo: c.PortLo, PortHi: c.PortHi, TcpTimeout: uint64(c.TCPTimeout),
		UdpTimeout: uint64(c.UDPTimeout), ClosedTimeout: uint64(NATClosedTimeout)}
	if c.Enabled {
		v.Enabled = 1
	}
	switch {
	case c.PortLo == 0 || c.PortHi < c.PortLo:
		return v, fmt.Errorf("nat ports %d-%d: want 1 <= low <= high", c.PortLo, c.PortHi)
	case c.Source4.IsValid() && !c.Source4.Unmap().Is4():
		return v, fmt.Errorf("nat source4 %v is not IPv4", c.Source4)
	case c.Source6.IsValid() && (!c.Source6.Is6() || c.Source6.Is4In6()):
		return v, fmt.Errorf("nat source6 %v is not IPv6", c.Source6)
	case c.TCPTimeout <= 0 || c.UDPTimeout <= 0:
		return v, errors.New("nat timeouts must be positive")
	}
	if c.Source4.IsValid() {
		v.Addr4 = c.Source4.Unmap().As4()
	}
	if c.Source6.IsValid() {
		v.Addr6 = c.Source6.As16()
	}
	return v, nil
}

// SetNAT writes the NAT settings; the program reads them from the next
// packet on. Mappings made under other settings keep their address and
// port until they expire.
func (lb *LB) SetNAT(c NATConfig) error {
	v, err := natConfigValue(c)
	if err != nil {
		return fmt.Errorf("set nat: %w", err)
	}
	if err := lb.objs.NatCfg.Set(v); err != nil {
		return fmt.Errorf("set nat: %w", err)
	}
	return nil
}

// NATMapping is a flow's NAT mapping: the source its backend sees.
type NATMapping struct {
	Source  netip.AddrPort // NAT address and port
	Backend uint32         // backend index
}

// LookupNAT returns the NAT mapping of f (Src = client, Dst = VIP);
// ErrNotFound if there is none.
func (lb *LB) LookupNAT(f l4.Flow) (NATMapping, error) {
	k := flowKeyOf(f)
	var m lbNatMapping
	if err := lb.objs.NatFlows.Lookup(&k, &m); err != nil {
		return NATMapping{}, fmt.Errorf("lookup nat %v: %w", f, notFound(err))
	}
	return NATMapping{Source: netip.AddrPortFrom(addrFrom16(m.Addr), ntohs(m.Port)), Backend: m.Backend}, nil
}

// NATMappings counts the reverse entries: the NAT ports held, whatever
// their age.
func (lb *LB) NATMappings() (int, error) {
	var (
		k lbFlowKey
		v lbNatReverse
		n int
	)
	it := lb.objs.NatReverse.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("nat mappings: %w", err)
	}
	return n, nil
}
