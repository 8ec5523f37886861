// ProbeEncap: tc_hc_encap, which sends the health probes of xdp VIPs to
// their backends the way the VIPs' client packets go (hcenc.c).

package bpf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/l4lb/l4lb/l4"
)

// probeEncapProgName is the kernel name of tc_hc_encap.
const probeEncapProgName = "tc_hc_encap"

// ProbeEncap is tc_hc_encap loaded with its maps, and once attached, its
// link on the egress of a probe device (a bpf_link: it goes with the
// process or with the device). Its methods are safe for concurrent use.
type ProbeEncap struct {
	objs hcencObjects
	link link.Link
}

// ProbeTarget is where the probes carrying one socket mark go.
type ProbeTarget struct {
	// Backend is the outer destination (ipip) or the next hop whose MAC
	// the probe is sent to (l2).
	Backend netip.Addr
	// Source is the outer source (ipip): the balancer's address of
	// Backend's family, as xdp_lb's.
	Source netip.Addr
	// Ifindex is the XDP interface the probe leaves through.
	Ifindex int
	Forward l4.Forward
}

// ProbeStats are tc_hc_encap's counters since it was loaded.
type ProbeStats struct {
	SentIPIP4    uint64 // encapsulated in IPv4 and sent
	SentIPIP6    uint64 // encapsulated in IPv6 and sent
	SentL2       uint64 // sent unchanged to a backend's MAC
	DropNoTarget uint64 // no target for the mark: dropped
	DropNotIP    uint64 // neither IPv4 nor IPv6: dropped
	DropEncap    uint64 // the outer header could not be pushed: dropped
}

// LoadProbeEncap loads tc_hc_encap and its (empty) target map.
func LoadProbeEncap() (*ProbeEncap, error) {
	var p ProbeEncap
	if err := loadHcencObjects(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load %s: %+v", probeEncapProgName, ve)
		}
		return nil, fmt.Errorf("load %s: %w", probeEncapProgName, err)
	}
	return &p, nil
}

// Attach runs the program on the egress of ifindex (tcx). One attach per
// ProbeEncap.
func (p *ProbeEncap) Attach(ifindex int) error {
	if p.link != nil {
		return fmt.Errorf("%s: attached already", probeEncapProgName)
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: p.objs.TcHcEncap, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		return fmt.Errorf("attach %s to the egress of ifindex %d: %w", probeEncapProgName, ifindex, err)
	}
	p.link = l
	return nil
}

// SetTarget makes the probes with socket mark go to t.
func (p *ProbeEncap) SetTarget(mark uint32, t ProbeTarget) error {
	v := hcencHcTarget{Dst: addr16(t.Backend), Ifindex: uint32(t.Ifindex), Forward: uint8(t.Forward)}
	if t.Forward == l4.ForwardIPIP {
		if !t.Source.IsValid() || t.Source.Unmap().Is4() != t.Backend.Unmap().Is4() {
			return fmt.Errorf("probe target %s: outer source %s is not of the backend's family", t.Backend, t.Source)
		}
		v.Src = addr16(t.Source)
	}
	if err := p.objs.HcTargets.Put(mark, &v); err != nil {
		return fmt.Errorf("probe target %#x -> %s: %w", mark, t.Backend, err)
	}
	return nil
}

// DeleteTarget removes mark's target (its probes are dropped from now
// on); a mark without one is not an error.
func (p *ProbeEncap) DeleteTarget(mark uint32) error {
	if err := p.objs.HcTargets.Delete(mark); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("probe target %#x: %w", mark, err)
	}
	return nil
}

// Stats reads the counters, summed over the CPUs.
func (p *ProbeEncap) Stats() (ProbeStats, error) {
	var s ProbeStats
	for _, c := range []struct {
		key hcencHcCounter
		out *uint64
	}{
		{hcencHcCounterHC_SENT_IPIP4, &s.SentIPIP4},
		{hcencHcCounterHC_SENT_IPIP6, &s.SentIPIP6},
		{hcencHcCounterHC_SENT_L2, &s.SentL2},
		{hcencHcCounterHC_DROP_NO_TARGET, &s.DropNoTarget},
		{hcencHcCounterHC_DROP_NOT_IP, &s.DropNotIP},
		{hcencHcCounterHC_DROP_ENCAP, &s.DropEncap},
	} {
		var per []uint64
		if err := p.objs.HcCounters.Lookup(uint32(c.key), &per); err != nil {
			return s, fmt.Errorf("%s stats: %w", probeEncapProgName, err)
		}
		for _, n := range per {
			*c.out += n
		}
	}
	return s, nil
}

// Close detaches the program and releases its maps.
func (p *ProbeEncap) Close() error {
	var err error
	if p.link != nil {
		err = p.link.Close()
	}
	return errors.Join(err, p.objs.Close())
}
