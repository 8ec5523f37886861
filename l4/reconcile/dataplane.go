// The one place where a VIP's mode picks its data plane, each plane
// bound to the mapping of its settings (mapping.go).

package reconcile

import (
	"fmt"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/proxy"
)

// openPlane opens a VIP's data plane (Runtime.newPlane; a fake in tests).
type openPlane func(key l4.VIPKey, vc *config.VIP, v *vip) (plane.Plane, func(*config.VIP) error, error)

// newPlane opens the data plane vc's mode and protocol ask for, for VIP
// v, and returns it with its update: what applies a reload's settings to
// it, in the plane's own terms. It is the only place that dispatches on
// mode.
func (r *Runtime) newPlane(key l4.VIPKey, vc *config.VIP, v *vip) (plane.Plane, func(*config.VIP) error, error) {
	switch {
	case vc.Mode == l4.ModeProxy && key.Proto == l4.TCP:
		p, err := r.proxy.NewTCP(r.proxyVIP(key, v), tcpSettings(vc))
		if err != nil {
			return nil, nil, err
		}
		return p, func(vc *config.VIP) error { return p.Update(tcpSettings(vc)) }, nil
	case vc.Mode == l4.ModeProxy && key.Proto == l4.UDP:
		p, err := r.proxy.NewUDP(r.proxyVIP(key, v), udpSettings(vc))
		if err != nil {
			return nil, nil, err
		}
		return p, func(vc *config.VIP) error { return p.Update(udpSettings(vc)) }, nil
	case vc.Mode == l4.ModeXDP:
		if r.xdp == nil {
			return nil, nil, fmt.Errorf("mode xdp needs an [xdp] table")
		}
		p, err := r.xdp.NewPlane(key, vipOptions(vc), v.log)
		if err != nil {
			return nil, nil, err
		}
		return p, func(vc *config.VIP) error { p.Update(vipOptions(vc)); return nil }, nil
	}
	return nil, nil, fmt.Errorf("mode %s for %s VIPs: %w", vc.Mode, key.Proto, errModeUnavailable)
}

// proxyVIP is what a proxy plane of v is given: its store, v for the
// outcomes of connects, and the sockets an earlier l4lb passed for it.
func (r *Runtime) proxyVIP(key l4.VIPKey, v *vip) proxy.PlaneVIP {
	return proxy.PlaneVIP{Key: key, Snapshots: &v.store, Observer: v, Log: v.log, Inherited: r.inherit.take(key)}
}
