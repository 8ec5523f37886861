// mtu.go: whether the path toward a backend carries a full packet plus the IPIP outer header.

package netif

import (
	"fmt"
	"net/netip"
)

// EncapOverhead is the size of the outer header that IPIP (IPv4 backend,
// 20 bytes) or IPv6 encapsulation (IPv6 backend, 40 bytes) adds toward
// backend.
func EncapOverhead(backend netip.Addr) int {
	if backend.Unmap().Is4() {
		return 20
	}
	return 40
}

// PathMTU returns the MTU of the path toward dst (see Route.MTU).
func (h *Handle) PathMTU(dst netip.Addr) (int, error) {
	r, err := h.RouteTo(dst)
	if err != nil {
		return 0, err
	}
	return r.MTU, nil
}

// CheckEncapMTU reports, as an error wrapping ErrMTU, when the path toward
// backend cannot carry an inner packet of innerMTU bytes (the MTU clients
// send with, usually the ingress interface's) plus the outer header. The
// XDP program then has to drop or answer "fragmentation needed" for full
// sized packets; the remedy is a larger MTU toward backends or a clamped
// MSS. Other errors come from the route lookup.
func (h *Handle) CheckEncapMTU(backend netip.Addr, innerMTU int) error {
	r, err := h.RouteTo(backend)
	if err != nil {
		return err
	}
	need := innerMTU + EncapOverhead(backend)
	if r.MTU < need {
		return fmt.Errorf("toward %s via %s: path MTU %d < %d (%d-byte packets plus a %d-byte outer header): %w",
			backend, r.IfName, r.MTU, need, innerMTU, EncapOverhead(backend), ErrMTU)
	}
	return nil
}
