// route.go: check connections that take the data plane's route to the backend.

package health

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/l4lb/l4lb/l4"
)

// routed sets d up to take route (source address and socket mark) and
// returns the address to dial: the route's, with addr's port.
func routed(d *net.Dialer, addr netip.AddrPort, route l4.ProbeRoute) netip.AddrPort {
	d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(route.Source.Unmap(), 0))
	d.Control = markControl(route.Mark)
	return netip.AddrPortFrom(route.Addr, addr.Port())
}

// routeNote ends the reason of a failed connect through route with the
// address it went to ("" without a route).
func routeNote(route l4.ProbeRoute, addr netip.AddrPort) string {
	if route.IsZero() {
		return ""
	}
	return fmt.Sprintf(" (to the VIP %s, forwarded as its clients)", netip.AddrPortFrom(route.Addr, addr.Port()))
}
