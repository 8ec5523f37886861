// forward = "nat": the NAT addresses, ports and timeouts the program
// holds, and the switch that turns its reply path on.

package xdpplane

import (
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/l4"
)

// NATOptions are [xdp]'s nat_* keys; zero fields take the defaults.
type NATOptions struct {
	// Source4 and Source6 are the NAT addresses; the zero Addr means the
	// interface's primary address of that family.
	Source4, Source6 netip.Addr
	// PortMin..PortMax are the NAT ports (default 1024..32767).
	PortMin, PortMax uint16
	// TCPTimeout and UDPTimeout are how long a mapping may idle before
	// its port may go to another flow (defaults 3h, 30s).
	TCPTimeout, UDPTimeout time.Duration
}

// natConfig is the program's NAT settings for o, with v4 and v6 (the
// interface's addresses) standing in for unset sources.
func natConfig(o NATOptions, v4, v6 netip.Addr) bpf.NATConfig {
	c := bpf.NATConfig{Source4: o.Source4, Source6: o.Source6, PortLo: o.PortMin, PortHi: o.PortMax,
		TCPTimeout: o.TCPTimeout, UDPTimeout: o.UDPTimeout}
	if !c.Source4.IsValid() {
		c.Source4 = v4
	}
	if !c.Source6.IsValid() {
		c.Source6 = v6
	}
	if c.PortLo == 0 || c.PortHi == 0 {
		c.PortLo, c.PortHi = 1024, 32767
	}
	if c.TCPTimeout <= 0 {
		c.TCPTimeout = 3 * time.Hour
	}
	if c.UDPTimeout <= 0 {
		c.UDPTimeout = 30 * time.Second
	}
	return c
}

// setNAT writes the NAT settings at start (Enabled as adopt found it).
func (x *Program) setNAT(v4, v6 netip.Addr) error {
	x.natMu.Lock()
	defer x.natMu.Unlock()
	on := x.nat.Enabled
	x.nat = natConfig(x.cfg.NAT, v4, v6)
	x.nat.Enabled = on
	if err := x.lb.SetNAT(x.nat); err != nil {
		return fmt.Errorf("xdp: %w", err)
	}
	return nil
}

// enableNAT turns the reply path on before the first forward = "nat" VIP
// is written; it stays on while the program runs (replies of mappings
// outlive their VIP's removal). A VIP whose family has no NAT address is
// refused: every packet of it would drop as drop_no_source.
func (x *Program) enableNAT(key l4.VIPKey) error {
	x.natMu.Lock()
	defer x.natMu.Unlock()
	src := x.nat.Source6
	if key.Addr.Addr().Unmap().Is4() {
		src = x.nat.Source4
	}
	if !src.IsValid() {
		return fmt.Errorf("xdp: %v: forward = \"nat\" needs a NAT source address of its family: set [xdp] nat_source4/nat_source6, or give %s one", key, x.cfg.Interfaces[0])
	}
	if x.nat.Enabled {
		return nil
	}
	x.nat.Enabled = true
	if err := x.lb.SetNAT(x.nat); err != nil {
		x.nat.Enabled = false
		return fmt.Errorf("xdp: %w", err)
	}
	x.log.Info("xdp: NAT on", zap.Stringer("source4", x.nat.Source4), zap.Stringer("source6", x.nat.Source6),
		zap.Uint16("port_min", x.nat.PortLo), zap.Uint16("port_max", x.nat.PortHi))
	return nil
}
