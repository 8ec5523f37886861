// proberoute.go: how a data plane wants a backend's health probes sent.

package l4

import "net/netip"

// ProbeRoute sends a backend's health probes the way its data plane sends
// the VIP's clients, where a connection to the backend's own address
// would not (an xdp VIP: encapsulated to the VIP, or sent to the VIP at
// the backend's MAC): a probe connects to Addr (the VIP's address, with
// the probe's port) from Source with socket mark Mark, which the plane
// routes to the backend. The zero value: probes connect to the backend's
// own address.
type ProbeRoute struct {
	Addr   netip.Addr
	Source netip.Addr
	Mark   uint32
}

// IsZero reports whether r is the zero value: a direct probe.
func (r ProbeRoute) IsZero() bool { return r == ProbeRoute{} }
