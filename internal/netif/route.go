// route.go: what the kernel would do with a packet to a backend: egress interface, gateway, source, MTU.

package netif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Route is the kernel's answer for one destination (ip route get).
type Route struct {
	Dst netip.Addr // as asked, without a zone (IfIndex says which link)
	// Src is the source address the kernel selects toward Dst: the one to
	// put in an IPIP outer header so that replies and ICMP errors about
	// the tunnel come back to this host.
	Src netip.Addr
	// Gateway is the next hop when Dst is not on a connected segment; the
	// zero Addr when it is.
	Gateway netip.Addr
	IfIndex int
	IfName  string
	// MTU is the path MTU toward Dst: the route's MTU metric or a learned
	// PMTU when there is one, else the egress interface's MTU.
	MTU int
	// Local: Dst is an address of this host (the route goes to lo).
	Local bool
}

// NextHop is the address whose MAC frames toward Dst carry: the gateway
// when there is one, else Dst itself.
func (r Route) NextHop() netip.Addr {
	if r.Gateway.IsValid() {
		return r.Gateway
	}
	return r.Dst
}

// OnLink reports whether Dst is reached without a gateway.
func (r Route) OnLink() bool { return !r.Gateway.IsValid() && !r.Local }

// RouteTo asks the kernel how it would send a packet to dst. A link-local
// IPv6 dst must carry its zone (fe80::1%eth0). Unreachable, prohibited and
// missing routes give an error wrapping ErrNoRoute.
func (h *Handle) RouteTo(dst netip.Addr) (Route, error) {
	dst = dst.Unmap()
	opts, err := h.zoneOptions(dst)
	if err != nil {
		return Route{}, err
	}
	routes, err := h.nl.RouteGetWithOptions(dst.AsSlice(), opts)
	if err != nil {
		return Route{}, routeError(dst, err)
	}
	if len(routes) == 0 {
		return Route{}, fmt.Errorf("route to %s: empty answer: %w", dst, ErrNoRoute)
	}
	return h.convertRoute(dst, routes[0])
}

// zoneOptions pins the lookup to the zone's interface.
func (h *Handle) zoneOptions(dst netip.Addr) (*netlink.RouteGetOptions, error) {
	if dst.Zone() == "" {
		return nil, nil
	}
	ifc, err := h.Lookup(dst.Zone())
	if err != nil {
		return nil, fmt.Errorf("route to %s: %w", dst, err)
	}
	return &netlink.RouteGetOptions{OifIndex: ifc.Index}, nil
}

func routeError(dst netip.Addr, err error) error {
	switch {
	case errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EHOSTUNREACH), errors.Is(err, unix.EACCES):
		return fmt.Errorf("route to %s: %v: %w", dst, err, ErrNoRoute)
	}
	return fmt.Errorf("route to %s: %w", dst, err)
}

func (h *Handle) convertRoute(dst netip.Addr, nr netlink.Route) (Route, error) {
	r := Route{
		Dst:     dst.WithZone(""),
		Src:     addrOf(nr.Src),
		Gateway: gatewayOf(nr),
		IfIndex: nr.LinkIndex,
		Local:   nr.Type == unix.RTN_LOCAL,
		MTU:     nr.MTU,
	}
	ifc, err := h.LookupIndex(nr.LinkIndex)
	if err != nil {
		return Route{}, fmt.Errorf("route to %s: egress %w", dst, err)
	}
	r.IfName = ifc.Name
	if r.MTU == 0 || r.MTU > ifc.MTU {
		r.MTU = ifc.MTU
	}
	return r, nil
}

// gatewayOf reads the gateway, including an IPv6 next hop of an IPv4
// route (RTA_VIA, RFC 5549).
func gatewayOf(nr netlink.Route) netip.Addr {
	if gw := addrOf(nr.Gw); gw.IsValid() {
		return gw
	}
	if v, ok := nr.Via.(*netlink.Via); ok && v != nil {
		return addrOf(v.Addr)
	}
	return netip.Addr{}
}

func addrOf(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok || a.IsUnspecified() {
		return netip.Addr{}
	}
	return a.Unmap()
}
