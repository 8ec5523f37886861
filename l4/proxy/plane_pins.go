// A TCP VIP's affinity pins as flow sync sends and installs them.

package proxy

import (
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

var _ plane.PinTable = (*TCPPlane)(nil)

// SyncedPins implements plane.PinTable: every live pin made here, with
// its idle time, whatever `within` (a pin is not refreshed while its
// connection lasts, only by the client's next connection, so the recent
// ones alone would miss the pins of long-lived connections).
func (p *TCPPlane) SyncedPins(_ time.Duration, fn func(plane.SyncedFlow) bool) int {
	a := p.svc.Affinity()
	if a == nil {
		return 0
	}
	fromPeers, more := 0, true
	a.RangePins(func(vip l4.VIPKey, client netip.Addr, b *l4.Backend, idle time.Duration, peer bool) bool {
		if peer {
			fromPeers++
			return true
		}
		if more && b != nil {
			more = fn(plane.SyncedFlow{Flow: l4.Flow{Src: netip.AddrPortFrom(client, 0), Dst: vip.Addr, Proto: vip.Proto},
				Backend: b.Addr, Age: idle, Pin: true})
		}
		return true
	})
	return fromPeers
}

// InstallPin implements plane.PinTable: the backend must be one the VIP
// can pick now (in its snapshot).
func (p *TCPPlane) InstallPin(f plane.SyncedFlow) plane.InstallResult {
	a := p.svc.Affinity()
	if a == nil || !f.Pin || f.Flow.Proto != l4.TCP || f.Flow.Dst != p.svc.key.Addr {
		return plane.InstallForeignVIP
	}
	var b *l4.Backend
	if snap := p.svc.snaps.Load(); snap != nil {
		for _, m := range snap.Members {
			if m.Backend.Addr == f.Backend {
				b = m.Backend
				break
			}
		}
	}
	if b == nil {
		return plane.InstallUnknownBackend
	}
	ok, err := a.InstallPin(p.svc.key, f.Flow.Src.Addr(), b, f.Age)
	switch {
	case err != nil:
		return plane.InstallFailed
	case !ok:
		return plane.InstallKnown // a pin here already (or one that would have expired)
	}
	return plane.Installed
}
