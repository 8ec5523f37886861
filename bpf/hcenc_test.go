// tc_hc_encap under BPF_PROG_TEST_RUN: the bytes it sends for each family
// pair, the l2 path, and what it drops.

package bpf

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// tc verdicts.
const (
	tcActShot     = 2
	tcActRedirect = 7
)

// skbMark is the head of struct __sk_buff up to mark: the one field a
// test run of tc_hc_encap needs (the kernel takes a shorter context).
type skbMark struct {
	Len, PktType, Mark uint32
}

// skbOut receives the whole struct __sk_buff after a run (the kernel
// copies all of it or fails; its size grows with kernels).
type skbOut struct {
	skbMark
	_ [1024]byte
}

// macProbe is the probe device's MAC (both ends of the probe's frame).
var macProbe = net.HardwareAddr{0x02, 0x4c, 0x4c, 0, 0, 0x01}

func testProbeEncap(t testing.TB) *ProbeEncap {
	t.Helper()
	testutil.RequirePriv(t, "loads BPF programs")
	p, err := LoadProbeEncap()
	must(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// runProbe runs tc_hc_encap on frame with socket mark. A redirected
// frame must leave without the mark: the route lookup of the
// encapsulated packet is not the probe's.
func runProbe(t testing.TB, p *ProbeEncap, mark uint32, frame []byte) (uint32, []byte) {
	t.Helper()
	var ctxOut skbOut
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+64), Context: skbMark{Mark: mark}, ContextOut: &ctxOut}
	ret, err := p.objs.TcHcEncap.Run(opts)
	must(t, err)
	if ret == tcActRedirect && ctxOut.Mark != 0 {
		t.Errorf("redirected with mark %#x still set", ctxOut.Mark)
	}
	return ret, opts.DataOut
}

// probeFrame is a probe's SYN from the balancer's address to v, as the
// probe device sends it.
func probeFrame(v l4.VIPKey) (frame, ip []byte) {
	src := lbSrc4
	if v.Addr.Addr().Is6() {
		src = lbSrc6
	}
	f := l4.Flow{Src: netip.AddrPortFrom(src, 41000), Dst: v.Addr, Proto: l4.TCP}
	seg := l4Segment(f, thSYN, nil)
	ip = ipPacket(f.Src.Addr(), f.Dst.Addr(), uint8(l4.TCP), 0x28, seg)
	return append(ethHeader(macProbe, macProbe, 0, 0, etherFor(ip)), ip...), ip
}

// TestProbeEncapBytes: a probe to an ipip VIP leaves encapsulated exactly
// as xdp_lb encapsulates the VIP's clients (outer header built here from
// the RFCs), for every pair of inner and outer family; its mark is
// cleared and the verdict is a redirect.
func TestProbeEncapBytes(t *testing.T) {
	p := testProbeEncap(t)
	for _, v := range []l4.VIPKey{vip4TCP, vip6TCP} {
		for _, be := range []netip.Addr{be4Near, be6Near} {
			t.Run(fmt.Sprintf("%v/in-%v", v, be), func(t *testing.T) {
				src := lbSrc4
				if be.Is6() {
					src = lbSrc6
				}
				mark := uint32(0x4c4c0007)
				must(t, p.SetTarget(mark, ProbeTarget{Backend: be, Source: src, Ifindex: 9, Forward: l4.ForwardIPIP}))
				frame, ip := probeFrame(v)
				before, err := p.Stats()
				must(t, err)
				ret, out := runProbe(t, p, mark, frame)
				if ret != tcActRedirect {
					t.Fatalf("verdict %d, want redirect", ret)
				}
				want := encapsulated(frame, ethHLen, len(ip), src, be, macProbe, macProbe)
				sameBytes(t, "encapsulated probe", out[:len(want)], want)
				if be.Is4() && !ipv4HeaderValid(out[ethHLen:]) {
					t.Error("outer IPv4 checksum invalid")
				}
				after, err := p.Stats()
				must(t, err)
				sent := after.SentIPIP4 - before.SentIPIP4
				if be.Is6() {
					sent = after.SentIPIP6 - before.SentIPIP6
				}
				if sent != 1 {
					t.Errorf("sent counter moved by %d: %+v -> %+v", sent, before, after)
				}
			})
		}
	}
}

// ethHLen is the probe frame's L2 header length (no tag).
const ethHLen = 14

// TestProbeEncapL2: a probe to an l2 VIP leaves unchanged (the kernel's
// neighbour table gives the backend's MAC on the redirect).
func TestProbeEncapL2(t *testing.T) {
	p := testProbeEncap(t)
	for _, v := range []l4.VIPKey{vip4TCP, vip6TCP} {
		be := be4Near
		if v.Addr.Addr().Is6() {
			be = be6Near
		}
		must(t, p.SetTarget(1, ProbeTarget{Backend: be, Ifindex: 9, Forward: l4.ForwardL2}))
		frame, _ := probeFrame(v)
		ret, out := runProbe(t, p, 1, frame)
		if ret != tcActRedirect {
			t.Fatalf("%v: verdict %d, want redirect", v, ret)
		}
		sameBytes(t, fmt.Sprintf("%v l2 probe", v), out[:len(frame)], frame)
	}
	st, err := p.Stats()
	must(t, err)
	if st.SentL2 != 2 {
		t.Errorf("sent_l2 = %d, want 2", st.SentL2)
	}
}

// TestProbeEncapDrops: a mark without a target (a probe whose target was
// removed, or any other packet routed into the device) and a frame that
// is not IP are dropped untouched, each counted; a deleted target drops.
func TestProbeEncapDrops(t *testing.T) {
	p := testProbeEncap(t)
	frame, _ := probeFrame(vip4TCP)
	if ret, out := runProbe(t, p, 5, frame); ret != tcActShot {
		t.Fatalf("unknown mark: verdict %d, want shot", ret)
	} else {
		sameBytes(t, "dropped frame", out[:len(frame)], frame)
	}
	must(t, p.SetTarget(5, ProbeTarget{Backend: be4Near, Source: lbSrc4, Ifindex: 9}))
	arp := append(ethHeader(macProbe, macProbe, 0, 0, 0x0806), make([]byte, 28)...)
	if ret, _ := runProbe(t, p, 5, arp); ret != tcActShot {
		t.Fatalf("not IP: verdict %d, want shot", ret)
	}
	must(t, p.DeleteTarget(5))
	must(t, p.DeleteTarget(5)) // absent: not an error
	if ret, _ := runProbe(t, p, 5, frame); ret != tcActShot {
		t.Fatalf("deleted target: verdict %d, want shot", ret)
	}
	st, err := p.Stats()
	must(t, err)
	if st != (ProbeStats{DropNoTarget: 2, DropNotIP: 1}) {
		t.Errorf("stats %+v", st)
	}
	if err := p.SetTarget(6, ProbeTarget{Backend: be4Near, Source: lbSrc6, Forward: l4.ForwardIPIP}); err == nil {
		t.Error("an outer source of the other family was accepted")
	}
}

// TestProbeForwardMatchesC: Go writes l4.Forward values as enum hc_forward.
func TestProbeForwardMatchesC(t *testing.T) {
	if uint32(l4.ForwardIPIP) != uint32(hcencHcForwardHC_FORWARD_IPIP) || uint32(l4.ForwardL2) != uint32(hcencHcForwardHC_FORWARD_L2) {
		t.Fatal("l4.Forward and enum hc_forward differ")
	}
}
