// iface.go: interface lookup: index, MTU, MAC, state and addresses.

package netif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Interface is a snapshot of one network interface.
type Interface struct {
	Index int
	Name  string
	Kind  string // "veth", "bridge", "device" (a physical NIC), ...
	MTU   int
	MAC   net.HardwareAddr
	// Up: administratively up (IFF_UP). Running: up with a carrier, so
	// that it can move packets now.
	Up, Running bool
	// Addrs in kernel order, IPv4 first: for IPv4 primaries come before
	// secondaries; for IPv6 global addresses come first, newest first.
	Addrs []Addr
}

// Addr is one address of an interface.
type Addr struct {
	Prefix netip.Prefix
	// LinkLocal: scope link (fe80::/10, 169.254.0.0/16); never a source
	// toward a backend off this segment.
	LinkLocal bool
	// Secondary: an IPv4 address in the same subnet as an earlier
	// (primary) one; the kernel does not pick it as a source by default.
	Secondary bool
	// Tentative: IPv6 duplicate address detection has not finished or
	// failed; the address cannot be used yet.
	Tentative bool
	// Deprecated: IPv6 preferred lifetime over; not chosen for new flows.
	Deprecated bool
}

// usable reports whether a can be a source for traffic off the link.
func (a Addr) usable() bool {
	return !a.LinkLocal && !a.Secondary && !a.Tentative && !a.Deprecated
}

// PrimaryV4 returns the first IPv4 address that is neither secondary nor
// link-local. RouteTo's Src is the address the kernel would actually use
// toward one destination; this is the interface's own default.
func (i Interface) PrimaryV4() (netip.Addr, bool) { return i.primary(true) }

// PrimaryV6 returns the first global IPv6 address that is neither
// tentative nor deprecated.
func (i Interface) PrimaryV6() (netip.Addr, bool) { return i.primary(false) }

func (i Interface) primary(v4 bool) (netip.Addr, bool) {
	for _, a := range i.Addrs {
		if a.Prefix.Addr().Is4() == v4 && a.usable() {
			return a.Prefix.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// Lookup returns the interface called name. An unknown name gives an error
// wrapping ErrNoInterface.
func (h *Handle) Lookup(name string) (Interface, error) {
	if name == "" {
		return Interface{}, fmt.Errorf("interface lookup: empty name: %w", ErrNoInterface)
	}
	l, err := h.nl.LinkByName(name)
	if err != nil {
		return Interface{}, linkError(fmt.Sprintf("interface %q", name), err)
	}
	return h.describe(l)
}

// LookupIndex returns the interface with the given index.
func (h *Handle) LookupIndex(index int) (Interface, error) {
	l, err := h.nl.LinkByIndex(index)
	if err != nil {
		return Interface{}, linkError(fmt.Sprintf("interface index %d", index), err)
	}
	return h.describe(l)
}

// linkError maps netlink's not-found error to ErrNoInterface.
func linkError(what string, err error) error {
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("%s: %w", what, ErrNoInterface)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (h *Handle) describe(l netlink.Link) (Interface, error) {
	a := l.Attrs()
	ifc := Interface{
		Index:   a.Index,
		Name:    a.Name,
		Kind:    l.Type(),
		MTU:     a.MTU,
		MAC:     a.HardwareAddr,
		Up:      a.Flags&net.FlagUp != 0,
		Running: a.Flags&net.FlagRunning != 0,
	}
	addrs, err := dump(func() ([]netlink.Addr, error) { return h.nl.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return Interface{}, fmt.Errorf("addresses of %s: %w", a.Name, err)
	}
	for _, na := range addrs {
		if addr, ok := convertAddr(na); ok {
			ifc.Addrs = append(ifc.Addrs, addr)
		}
	}
	return ifc, nil
}

func convertAddr(na netlink.Addr) (Addr, bool) {
	if na.IPNet == nil {
		return Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(na.IP)
	if !ok {
		return Addr{}, false
	}
	ones, _ := na.Mask.Size()
	return Addr{
		Prefix:     netip.PrefixFrom(ip.Unmap(), ones),
		LinkLocal:  na.Scope == unix.RT_SCOPE_LINK,
		Secondary:  na.Flags&unix.IFA_F_SECONDARY != 0,
		Tentative:  na.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0,
		Deprecated: na.Flags&unix.IFA_F_DEPRECATED != 0,
	}, true
}
