// The probe tunnel: health probes of xdp VIPs reach their backends the way
// the VIPs' clients do (Katran's health-check encapsulation). A probe
// connects to the VIP with a socket mark that names its backend; a policy
// rule routes marked packets into l4lb's probe device, whose egress
// program (bpf.ProbeEncap) encapsulates them to the backend (ipip) or
// addresses them to its MAC (l2) and sends them out of the XDP interface.
// The backend answers the balancer directly, from the VIP.

package xdpplane

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/internal/netif"
	"github.com/l4lb/l4lb/l4"
)

// The probe device and the marks that select it. A probe of the backend
// with index i carries ProbeMark | i (indexes fit in the low 16 bits).
const (
	probeDevice   = "l4lbprobe0"
	ProbeMark     = 0x4c4c0000
	probeMarkMask = 0xffff0000
	probeTable    = 0x4c4c // 19532
	probeRulePref = 90     // before the main table (32766), after local (0)
)

// probeTunnel is the probe device with its program, and the targets it
// holds. Its methods are safe for concurrent use.
type probeTunnel struct {
	enc  *bpf.ProbeEncap
	dev  *netif.ProbeDevice
	src4 netip.Addr // the XDP interfaces' first addresses: probe and outer sources (xdp_lb's)
	src6 netip.Addr

	mu      sync.Mutex
	nl      *netif.Handle              // its own: routes toward backends, asked under mu
	targets map[uint32]bpf.ProbeTarget // by mark: what the map holds
}

// startProbes makes the probe device on x's interface and attaches the
// encapsulation program to it.
func (x *Program) startProbes() (_ *probeTunnel, err error) {
	t := &probeTunnel{targets: map[uint32]bpf.ProbeTarget{}}
	mtu := 0
	for _, ifc := range x.interfaces() {
		if a, _ := ifc.PrimaryV4(); !t.src4.IsValid() {
			t.src4 = a
		}
		if a, _ := ifc.PrimaryV6(); !t.src6.IsValid() {
			t.src6 = a
		}
		if mtu == 0 || ifc.MTU < mtu {
			mtu = ifc.MTU
		}
	}
	if t.enc, err = bpf.LoadProbeEncap(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if t.nl, err = netif.Open(); err != nil {
		return nil, err
	}
	// The device's MTU leaves room for an outer IPv6 header.
	t.dev, err = x.nl.CreateProbeDevice(netif.ProbeDeviceOptions{Name: probeDevice, MTU: mtu - 40,
		Mark: ProbeMark, Mask: probeMarkMask, Table: probeTable, Priority: probeRulePref})
	if err != nil {
		return nil, err
	}
	if err := t.enc.Attach(t.dev.Index); err != nil {
		return nil, err
	}
	return t, nil
}

// close removes the device (with its rules and routes) and the program.
func (t *probeTunnel) close() error {
	var err error
	if t.dev != nil {
		err = t.dev.Close()
	}
	if t.enc != nil {
		if cerr := t.enc.Close(); err == nil {
			err = cerr
		}
	}
	if t.nl != nil {
		t.nl.Close()
	}
	return err
}

// source is the interface's address of a's family (invalid if none).
func (t *probeTunnel) source(a netip.Addr) netip.Addr {
	if a.Unmap().Is4() {
		return t.src4
	}
	return t.src6
}

// route writes b's target (forwarded as fwd) and returns the route its
// probes to the VIP at vip take. Probes of gue VIPs are encapsulated in
// IPIP, which decap strips as well: they check decap and the VIP on the
// backend, not its GUE port.
func (t *probeTunnel) route(vip netip.Addr, b *l4.Backend, fwd l4.Forward) (l4.ProbeRoute, error) {
	if fwd.Encapsulates() {
		fwd = l4.ForwardIPIP
	}
	from := t.source(vip)
	if !from.IsValid() {
		return l4.ProbeRoute{}, fmt.Errorf("the xdp interface has no address of the VIP's family to probe from")
	}
	if isLocal(vip) {
		return l4.ProbeRoute{}, fmt.Errorf("the VIP %s is an address of this host: the kernel would deliver probes to it here", vip)
	}
	be := b.Addr.Addr()
	target := bpf.ProbeTarget{Backend: be, Forward: fwd}
	if fwd == l4.ForwardIPIP {
		if target.Source = t.source(be); !target.Source.IsValid() {
			return l4.ProbeRoute{}, fmt.Errorf("the xdp interface has no address of the backend's family to encapsulate from")
		}
	}
	mark := ProbeMark | b.Index
	t.mu.Lock()
	defer t.mu.Unlock()
	// The probe leaves by the interface the kernel routes the backend
	// through, as xdp_lb's FIB lookup sends its clients.
	rt, err := t.nl.RouteTo(be)
	if err != nil {
		return l4.ProbeRoute{}, err
	}
	target.Ifindex = rt.IfIndex
	if cur, ok := t.targets[mark]; !ok || cur != target {
		if err := t.enc.SetTarget(mark, target); err != nil {
			return l4.ProbeRoute{}, err
		}
		t.targets[mark] = target
	}
	return l4.ProbeRoute{Addr: vip, Source: from, Mark: mark}, nil
}

// isLocal reports whether a is an address of one of this host's
// interfaces (the local table, which precedes the probe rule, would take
// probes to it).
func isLocal(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a.Unmap() {
				return true
			}
		}
	}
	return false
}

// forget deletes the target of backend index i: its probes are dropped.
func (t *probeTunnel) forget(i uint32) {
	mark := ProbeMark | i
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.targets[mark]; ok {
		_ = t.enc.DeleteTarget(mark)
		delete(t.targets, mark)
	}
}

// ProbeRoute readies the route of b's health probes: to the VIP, from the
// XDP interface's address, marked for b, forwarded as the VIP's clients
// are. False (probe b's own address) without a probe tunnel, for a
// backend without an index, for a nat VIP (its clients reach the
// backend's own address, as a direct probe does), or without a source
// address of the VIP's or the backend's family on the interface.
func (p *Plane) ProbeRoute(b *l4.Backend) (l4.ProbeRoute, bool) {
	t := p.x.probes
	fwd := p.conf().Forward
	if t == nil || b.Index == 0 || b.Index > ^uint32(probeMarkMask) || (fwd != l4.ForwardL2 && !fwd.Encapsulates()) {
		return l4.ProbeRoute{}, false // nat: clients reach the backend's own address, as a direct probe does
	}
	var r l4.ProbeRoute
	var err error
	if !p.x.using(func() { r, err = t.route(p.key.Addr.Addr(), b, fwd) }) {
		return l4.ProbeRoute{}, false
	}
	if err != nil {
		p.log.Warn("xdp: health probes go to the backend's own address, not through the VIP's forwarding", zap.String("backend", string(b.ID)), zap.Error(err))
		return l4.ProbeRoute{}, false
	}
	p.mu.Lock()
	p.probed[b.Index] = struct{}{}
	p.mu.Unlock()
	return r, true
}

// forgetProbesLocked deletes the probe targets of the given backend
// indexes (p.mu held).
func (p *Plane) forgetProbesLocked(indexes ...uint32) {
	for _, i := range indexes {
		if _, ok := p.probed[i]; ok {
			p.x.probes.forget(i)
			delete(p.probed, i)
		}
	}
}
