// The XDP program's conntrack as a plane.FlowTable: what flow sync sends
// to peer balancers and installs from them.

package xdpplane

import (
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

var _ plane.FlowTable = (*Program)(nil)

// backendMaps maps every live (not retired) backend entry of the xdp
// VIPs to its address, and each VIP to its planes' backends by address.
// NAT VIPs are left out: a NAT flow's replies come back to the address of
// the balancer that translated it, so it cannot move to a peer (and its
// peer has no NAT state for it).
func (x *Program) backendMaps() (byIndex map[uint32]netip.AddrPort, byVIP map[l4.VIPKey]map[netip.AddrPort]uint32) {
	byIndex = map[uint32]netip.AddrPort{}
	byVIP = map[l4.VIPKey]map[netip.AddrPort]uint32{}
	for _, p := range x.planeList() {
		if p.conf().Forward == l4.ForwardNAT {
			continue
		}
		p.mu.Lock()
		if !p.stopped {
			m := map[netip.AddrPort]uint32{}
			for i, xb := range p.backends {
				if !xb.retired {
					byIndex[i] = xb.b.Addr
					m[xb.b.Addr] = i
				}
			}
			byVIP[p.key] = m
		}
		p.mu.Unlock()
	}
	return byIndex, byVIP
}

// PinnedFlows implements plane.FlowTable.
func (x *Program) PinnedFlows(within time.Duration, fn func(plane.SyncedFlow) bool) (int, error) {
	byIndex, _ := x.backendMaps()
	fromPeers := 0
	var err error
	x.using(func() {
		now := bpf.MonotonicNow()
		err = x.lb.Flows(func(f l4.Flow, e bpf.FlowEntry) bool {
			if e.Synced {
				fromPeers++
				return true
			}
			age := now - e.LastSeen
			be, ok := byIndex[e.Backend]
			if age > within || !ok {
				return true
			}
			return fn(plane.SyncedFlow{Flow: f, Backend: be, Age: max(age, 0), Closing: e.Closing})
		})
	})
	return fromPeers, err
}

// InstallFlows implements plane.FlowTable.
func (x *Program) InstallFlows(flows []plane.SyncedFlow, results []plane.InstallResult) {
	_, byVIP := x.backendMaps()
	if x.held.Load() || !x.using(func() { // held: another l4lb takes the maps over
		now := bpf.MonotonicNow()
		for i, f := range flows {
			results[i] = x.install(byVIP, now, f)
		}
	}) {
		for i := range flows {
			results[i] = plane.InstallFailed
		}
	}
}

func (x *Program) install(byVIP map[l4.VIPKey]map[netip.AddrPort]uint32, now time.Duration, f plane.SyncedFlow) plane.InstallResult {
	bes, ok := byVIP[l4.VIPKey{Addr: f.Flow.Dst, Proto: f.Flow.Proto}]
	if !ok {
		return plane.InstallForeignVIP
	}
	idx, ok := bes[f.Backend]
	if !ok {
		return plane.InstallUnknownBackend
	}
	err := x.lb.InsertFlow(f.Flow, bpf.FlowEntry{Backend: idx, Closing: f.Closing, LastSeen: now - f.Age, Synced: true})
	switch {
	case err == nil:
		return plane.Installed
	case err == bpf.ErrFlowExists:
		return plane.InstallKnown
	}
	return plane.InstallFailed
}
