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

// connecting is what a failed connect was doing, for the reason: through
// a route it names the address the probe went to.
func connecting(route l4.ProbeRoute, addr netip.AddrPort) string {
	if route.IsZero() {
		return "connecting"
	}
	return fmt.Sprintf("connecting to the VIP %s as clients do", netip.AddrPortFrom(route.Addr, addr.Port()))
}
