// probedev.go: the device that health probes of xdp VIPs are routed into
// by their socket mark, with its policy rule and routes.

package netif

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ProbeDeviceOptions shape a probe device. Every field is required.
type ProbeDeviceOptions struct {
	// Name is the device's; its veth peer is Name with the last
	// character replaced by 'p' (never up: a packet that reaches it is
	// dropped).
	Name string
	MTU  int
	// Mark/Mask select the packets (by socket mark) that the rule routes
	// into the device: mark & Mask == Mark.
	Mark, Mask uint32
	// Table holds the device's two default routes; Priority is the rule's.
	Table, Priority int
}

// ProbeDevice is a veth end with no address, no ARP and no carrier, and a
// policy rule (IPv4 and IPv6) that sends every packet whose socket mark
// matches into it through its own routing table: a program on its egress
// (bpf.ProbeEncap) takes the packets from there. Nothing else is routed
// into it.
type ProbeDevice struct {
	h     *Handle
	opts  ProbeDeviceOptions
	Index int
}

// CreateProbeDevice makes the device, its routes and its rules, after
// removing what a crashed process may have left under the same name and
// table. On failure nothing is left behind.
func (h *Handle) CreateProbeDevice(o ProbeDeviceOptions) (_ *ProbeDevice, err error) {
	if len(o.Name) < 2 || len(o.Name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("probe device name %q: want 2..%d characters", o.Name, unix.IFNAMSIZ-1)
	}
	d := &ProbeDevice{h: h, opts: o}
	d.removeStale()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: o.Name, MTU: o.MTU, Flags: net.FlagUp}, PeerName: d.peerName()}
	if err := h.nl.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("probe device %s: %w", o.Name, err)
	}
	defer func() {
		if err != nil {
			d.removeStale()
		}
	}()
	l, err := h.nl.LinkByName(o.Name)
	if err != nil {
		return nil, linkError("probe device "+o.Name, err)
	}
	d.Index = l.Attrs().Index
	if err := h.nl.LinkSetARPOff(l); err != nil {
		return nil, fmt.Errorf("probe device %s: arp off: %w", o.Name, err)
	}
	if err := h.nl.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("probe device %s: up: %w", o.Name, err)
	}
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		if err := d.route(family); err != nil {
			return nil, err
		}
		if err := h.nl.RuleAdd(d.rule(family)); err != nil {
			return nil, fmt.Errorf("probe device %s: rule: %w", o.Name, err)
		}
	}
	return d, nil
}

// peerName is the veth peer's name.
func (d *ProbeDevice) peerName() string { return d.opts.Name[:len(d.opts.Name)-1] + "p" }

// route adds the table's default route of family through the device.
func (d *ProbeDevice) route(family int) error {
	dst := &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}
	if family == unix.AF_INET6 {
		dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	r := &netlink.Route{LinkIndex: d.Index, Dst: dst, Table: d.opts.Table, Scope: netlink.SCOPE_LINK, Family: family}
	if err := d.h.nl.RouteAdd(r); err != nil {
		return fmt.Errorf("probe device %s: route %s: %w", d.opts.Name, dst, err)
	}
	return nil
}

// rule is the policy rule of family that sends marked packets to the table.
func (d *ProbeDevice) rule(family int) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = family
	r.Mark, r.Mask = d.opts.Mark, &d.opts.Mask
	r.Table, r.Priority = d.opts.Table, d.opts.Priority
	return r
}

// removeStale deletes a link of the device's name and every rule that
// points at its table.
func (d *ProbeDevice) removeStale() {
	if l, err := d.h.nl.LinkByName(d.opts.Name); err == nil {
		_ = d.h.nl.LinkDel(l) // its peer and its routes go with it
	}
	d.deleteRules()
}

// deleteRules removes every rule, of both families, that looks up the
// device's table.
func (d *ProbeDevice) deleteRules() {
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		rules, err := dump(func() ([]netlink.Rule, error) { return d.h.nl.RuleList(family) })
		if err != nil {
			continue
		}
		for i := range rules {
			if rules[i].Table == d.opts.Table {
				_ = d.h.nl.RuleDel(&rules[i])
			}
		}
	}
}

// Close removes the device, its routes and its rules, unless another
// process made its own device of the same name since (an upgrade's new
// l4lb): then what is there is that process's, and stays.
func (d *ProbeDevice) Close() error {
	l, err := d.h.nl.LinkByName(d.opts.Name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("probe device %s: %w", d.opts.Name, err)
	}
	if l.Attrs().Index != d.Index {
		return nil
	}
	d.deleteRules()
	if err := d.h.nl.LinkDel(l); err != nil {
		return fmt.Errorf("probe device %s: delete: %w", d.opts.Name, err)
	}
	return nil
}
