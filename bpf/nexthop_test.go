// The nexthops map: an ipip packet goes where its backend's entry says,
// without the FIB; without a valid entry it takes the FIB as before.

package bpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// TestNextHopForwards: with an entry, a packet leaves encapsulated from
// our source to the entry's MACs, out of the entry's interface (XDP_TX
// when it is the ingress one, else a redirect), for backends the FIB
// cannot route at all, and bpf_fib_lookup is not called; a packet whose
// outer size is above the entry's MTU is answered with ICMP too big, and
// dropped as too big when it is too short to quote.
func TestNextHopForwards(t *testing.T) {
	lb := newTestLB(t, testOptions)
	r := runner{prog: lb.objs.XdpLb, ingress: 3} // no namespace: the FIB has no route to any backend
	dmac, smac := net.HardwareAddr{2, 0xd, 0, 0, 0, 1}, net.HardwareAddr{2, 0x5, 0, 0, 0, 1}
	src4, src6 := netip.MustParseAddr("198.18.77.1"), netip.MustParseAddr("2001:db8:77::1")
	must(t, lb.SetSource(src4, src6))
	for bi, be := range []netip.Addr{be4NoRoute, netip.MustParseAddr("2001:db8:ff::1")} {
		src := src4
		if be.Is6() {
			src = src6
		}
		idx := uint32(bi + 1)
		addBackend(t, lb, idx, be)
		for vi, v := range []l4.VIPKey{vip4TCP, vip6TCP} {
			for _, egress := range []struct {
				ifindex int
				verdict uint32
			}{{3, xdpTX}, {4, xdpRedirect}} {
				t.Run(fmt.Sprintf("%v/to-%v/if%d", v, be, egress.ifindex), func(t *testing.T) {
					frame, ip := frameSpec{flow: flowTo(v), flags: thSYN, tos: 0x28, payload: make([]byte, 1300)}.build()
					l3 := len(frame) - len(ip)
					outer := len(ip) + 20
					if be.Is6() {
						outer = len(ip) + 40
					}
					addVIP(t, lb, v, uint32(vi), l4.ForwardIPIP, l4.HashFiveTuple, []uint32{idx})
					must(t, lb.SetNextHop(idx, be, NextHop{DstMAC: dmac, SrcMAC: smac, IfIndex: egress.ifindex, MTU: outer}))
					fib0, _ := lb.NextHopFIB()
					ret, out := r.run(t, frame)
					if ret != egress.verdict {
						t.Fatalf("verdict %s, want %s", verdictName(ret), verdictName(egress.verdict))
					}
					sameBytes(t, "frame", out, encapsulated(frame, l3, len(ip), src, be, dmac, smac))
					if fib1, _ := lb.NextHopFIB(); fib1 != fib0 {
						t.Errorf("nexthop_fib moved %d -> %d: the FIB was asked", fib0, fib1)
					}

					must(t, lb.SetNextHop(idx, be, NextHop{DstMAC: dmac, SrcMAC: smac, IfIndex: egress.ifindex, MTU: outer - 1}))
					d := counterDelta(t, lb, func() {
						if ret, _ := r.run(t, frame); ret != xdpTX {
							t.Errorf("one byte above the MTU: verdict %s, want TX (ICMP too big)", verdictName(ret))
						}
					})
					onlyCounters(t, d, CounterCTSyn, CounterICMPTooBig)
					short, _ := frameSpec{flow: flowTo(v), flags: thSYN}.build()
					must(t, lb.SetNextHop(idx, be, NextHop{DstMAC: dmac, SrcMAC: smac, IfIndex: egress.ifindex, MTU: len(short) - l3}))
					d = counterDelta(t, lb, func() {
						if ret, _ := r.run(t, short); ret != xdpDrop {
							t.Errorf("short packet above the MTU: verdict %s, want DROP", verdictName(ret))
						}
					})
					onlyCounters(t, d, CounterCTSyn, CounterDropTooBig)
				})
			}
		}
	}
}

// TestNextHopMissTakesFIB: without an entry, or after ClearNextHop, the
// packet takes bpf_fib_lookup (nexthop_fib counts it) with the FIB's
// verdicts; a backend index that gets another address loses its entry,
// and an entry resolved for the old address is refused.
func TestNextHopMissTakesFIB(t *testing.T) {
	lb := newTestLB(t, testOptions)
	fn := newFibNet(t)
	must(t, lb.SetSource(lbSrc4, lbSrc6))
	r := runner{prog: lb.objs.XdpLb, net: fn, ingress: fn.lb0}
	addBackend(t, lb, 1, be4Near)
	addVIP(t, lb, vip4TCP, 0, l4.ForwardIPIP, l4.HashFiveTuple, []uint32{1})
	frame, ip := frameSpec{flow: flowTo(vip4TCP), flags: thSYN}.build()
	l3 := len(frame) - len(ip)
	viaFIB := encapsulated(frame, l3, len(ip), lbSrc4, be4Near, macNear, fn.mac0)
	other := net.HardwareAddr{2, 0xee, 0, 0, 0, 1}
	hop := NextHop{DstMAC: other, SrcMAC: fn.mac0, IfIndex: fn.lb0, MTU: 1500}

	expect := func(t *testing.T, what string, want []byte, fibDelta uint64) {
		t.Helper()
		fib0, _ := lb.NextHopFIB()
		ret, out := r.run(t, frame)
		fib1, _ := lb.NextHopFIB()
		if ret != xdpTX || fib1-fib0 != fibDelta {
			t.Fatalf("%s: verdict %s, nexthop_fib +%d, want TX, +%d", what, verdictName(ret), fib1-fib0, fibDelta)
		}
		sameBytes(t, what, out, want)
	}
	expect(t, "no entry", viaFIB, 1)
	must(t, lb.SetNextHop(1, be4Near, hop))
	expect(t, "entry", encapsulated(frame, l3, len(ip), lbSrc4, be4Near, other, fn.mac0), 0)
	must(t, lb.ClearNextHop(1))
	expect(t, "cleared", viaFIB, 1)

	// The index moves to another address: the old next hop goes with it.
	must(t, lb.SetNextHop(1, be4Near, hop))
	addBackend(t, lb, 1, be4Far)
	if _, ok, err := lb.NextHopOf(1); ok || err != nil {
		t.Fatalf("next hop kept across an address change (%v)", err)
	}
	if err := lb.SetNextHop(1, be4Near, hop); !errors.Is(err, ErrStaleNextHop) {
		t.Fatalf("next hop for the old address: %v, want ErrStaleNextHop", err)
	}
	addBackend(t, lb, 1, be4Far) // same address: the entry stays
	must(t, lb.SetNextHop(1, be4Far, hop))
	addBackend(t, lb, 1, be4Far)
	if got, ok, _ := lb.NextHopOf(1); !ok || !got.Equal(hop) {
		t.Fatalf("next hop after rewriting the same backend: %+v %v", got, ok)
	}
	must(t, lb.DeleteBackend(1))
	if _, ok, _ := lb.NextHopOf(1); ok {
		t.Fatal("next hop kept after DeleteBackend")
	}
}
