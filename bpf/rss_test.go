// RSS-friendly encapsulation: GUE frames byte for byte, per-flow outer
// sources inside the configured prefixes, and xdp_decap stripping GUE.

package bpf

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// gueEncapsulated is the frame expected after GUE forwarding of frame:
// outer IP (protocol 17) + UDP (sport, DefaultGUEPort, length, checksum 0)
// + the inner IP packet, built from the RFCs, not from the C.
func gueEncapsulated(frame []byte, l3, ipLen int, src, dst netip.Addr, dmac, smac net.HardwareAddr, sport uint16) []byte {
	inner := frame[l3 : l3+ipLen]
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], DefaultGUEPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+ipLen))
	outer := outerHeader(src, dst, inner)
	if src.Is4() {
		outer = ipv4Header(src, dst, 17, outer[1], 64, 0, 8+ipLen)
	} else {
		outer[6] = 17
		binary.BigEndian.PutUint16(outer[4:], uint16(8+ipLen))
	}
	l2 := append(append(append([]byte{}, dmac...), smac...), frame[12:l3]...)
	binary.BigEndian.PutUint16(l2[l3-2:], etherFor(outer))
	out := append(append(l2, outer...), udp...)
	return append(out, inner...)
}

// fibLB is a balancer with its sources and default encapsulation set,
// and a runner in the FIB namespace.
func fibLB(t *testing.T) (*LB, *fibNet, runner) {
	lb := newTestLB(t, testOptions)
	fn := newFibNet(t)
	must(t, lb.SetSource(lbSrc4, lbSrc6))
	must(t, lb.SetEncap(Encap{}))
	return lb, fn, runner{prog: lb.objs.XdpLb, net: fn, ingress: fn.lb0}
}

// outerOf reads an encapsulated frame's outer source and (GUE) UDP
// source port; l3 is the outer header's offset.
func outerOf(out []byte, l3 int) (src netip.Addr, sport uint16) {
	hlen := 20
	if out[l3]>>4 == 4 {
		src, _ = netip.AddrFromSlice(out[l3+12 : l3+16])
	} else {
		src, _ = netip.AddrFromSlice(out[l3+8 : l3+24])
		hlen = 40
	}
	if len(out) >= l3+hlen+8 {
		sport = binary.BigEndian.Uint16(out[l3+hlen:])
	}
	return src, sport
}

// TestForwardGUE: forward = gue pushes outer IP + UDP to the GUE port
// with a source port from the dynamic range, length right, checksum 0,
// the inner packet byte for byte; every family, near and far, tagged.
func TestForwardGUE(t *testing.T) {
	lb, fn, r := fibLB(t)
	backends := fibBackends(fn)
	for bi, be := range backends {
		addBackend(t, lb, uint32(bi+1), be.addr)
	}
	for vi, v := range vips {
		for bi, be := range backends {
			for _, tag := range tags {
				t.Run(fmt.Sprintf("%v/to-%v/%s", v, be.addr, tag.name), func(t *testing.T) {
					addVIP(t, lb, v, uint32(vi), l4.ForwardGUE, l4.HashFiveTuple, []uint32{uint32(bi + 1)})
					if _, err := lb.PurgeVIP(v); err != nil { // UDP flows stay pinned otherwise
						t.Fatal(err)
					}
					frame, ip := frameSpec{flow: flowTo(v), flags: thSYN, tos: 0xb8, tpid: tag.tpid, vlan: tag.vlan}.build()
					ret, out := r.run(t, frame)
					if ret != be.verdict {
						t.Fatalf("verdict %s, want %s", verdictName(ret), verdictName(be.verdict))
					}
					l3 := len(frame) - len(ip)
					src := lbSrc4
					if be.addr.Is6() {
						src = lbSrc6
					}
					_, sport := outerOf(out, l3)
					if sport < 49152 {
						t.Errorf("GUE source port %d is not in the dynamic range", sport)
					}
					sameBytes(t, "frame", out, gueEncapsulated(frame, l3, len(ip), src, be.addr, be.dmac, be.smac, sport))
					if be.addr.Is4() && !ipv4HeaderValid(out[l3:]) {
						t.Error("outer IPv4 checksum invalid")
					}
					if _, again := r.run(t, frame); !sameOuter(again, out, l3) {
						t.Error("the same flow's second packet left with another outer source or port")
					}
				})
			}
		}
	}
}

// sameOuter says whether two encapsulated frames have the same outer
// source and UDP source port.
func sameOuter(a, b []byte, l3 int) bool {
	sa, pa := outerOf(a, l3)
	sb, pb := outerOf(b, l3)
	return sa == sb && pa == pb
}

// TestEncapSourcePrefix: with source_prefix4/6 set, each flow's outer
// source is an address of the prefix, the same for all its packets and
// different across flows (and so is GUE's source port); a /32 is one
// fixed address; without prefixes the balancer's own address is used.
func TestEncapSourcePrefix(t *testing.T) {
	lb, _, r := fibLB(t)
	addBackend(t, lb, 1, be4Near)
	addBackend(t, lb, 2, be6Near)
	p4 := netip.MustParsePrefix("198.18.77.0/24")
	p6 := netip.MustParsePrefix("2001:db8:77::/64")
	const flows = 64
	for _, c := range []struct {
		fwd     l4.Forward
		backend uint32
		prefix  netip.Prefix
		want    int // at least this many distinct sources over the flows
	}{
		{l4.ForwardIPIP, 1, p4, flows / 2},
		{l4.ForwardIPIP, 2, p6, flows},
		{l4.ForwardGUE, 1, p4, flows / 2},
		{l4.ForwardGUE, 2, p6, flows},
		{l4.ForwardIPIP, 1, netip.MustParsePrefix("198.18.77.9/32"), 1},
		{l4.ForwardGUE, 2, netip.MustParsePrefix("2001:db8:77::9/128"), 1},
	} {
		t.Run(fmt.Sprintf("%v/%v", c.fwd, c.prefix), func(t *testing.T) {
			e := Encap{Prefix4: c.prefix}
			if c.prefix.Addr().Is6() {
				e = Encap{Prefix6: c.prefix}
			}
			must(t, lb.SetEncap(e))
			addVIP(t, lb, vip4TCP, 1, c.fwd, l4.HashFiveTuple, []uint32{c.backend})
			if _, err := lb.PurgeVIP(vip4TCP); err != nil { // flows stay pinned otherwise
				t.Fatal(err)
			}
			srcs, ports := map[netip.Addr]bool{}, map[uint16]bool{}
			for i := range flows {
				f := flowTo(vip4TCP)
				f.Src = netip.AddrPortFrom(f.Src.Addr(), uint16(30000+i))
				frame, _ := frameSpec{flow: f, flags: thACK}.build()
				ret, out := r.run(t, frame)
				if ret != xdpTX {
					t.Fatalf("verdict %s", verdictName(ret))
				}
				src, sport := outerOf(out, 14)
				if !c.prefix.Contains(src) {
					t.Fatalf("outer source %v outside %v", src, c.prefix)
				}
				if src.Is4() && !ipv4HeaderValid(out[14:]) {
					t.Fatal("outer IPv4 checksum invalid")
				}
				if _, again := r.run(t, frame); !sameOuter(again, out, 14) {
					t.Fatal("the same flow's second packet left with another outer source or port")
				}
				srcs[src], ports[sport] = true, true
			}
			if len(srcs) < c.want || len(srcs) > c.want && c.want == 1 {
				t.Errorf("%d flows left from %d sources, want %d or more (1 for a single address)", flows, len(srcs), c.want)
			}
			if c.fwd == l4.ForwardGUE && len(ports) < flows*3/4 {
				t.Errorf("%d flows left from %d GUE source ports", flows, len(ports))
			}
		})
	}
	must(t, lb.SetEncap(Encap{}))
	addVIP(t, lb, vip4TCP, 1, l4.ForwardIPIP, l4.HashFiveTuple, []uint32{1})
	if _, err := lb.PurgeVIP(vip4TCP); err != nil {
		t.Fatal(err)
	}
	frame, _ := frameSpec{flow: flowTo(vip4TCP), flags: thACK}.build()
	if _, out := r.run(t, frame); func() netip.Addr { s, _ := outerOf(out, 14); return s }() != lbSrc4 {
		t.Error("without a prefix the outer source is not the balancer's own address")
	}
}

// TestSetEncapRefuses: prefixes of the wrong family, or an IPv6 prefix
// shorter than /64, are refused.
func TestSetEncapRefuses(t *testing.T) {
	lb := newTestLB(t, testOptions)
	for _, e := range []Encap{
		{Prefix4: netip.MustParsePrefix("2001:db8::/64")},
		{Prefix6: netip.MustParsePrefix("198.18.0.0/24")},
		{Prefix6: netip.MustParsePrefix("2001:db8::/48")},
	} {
		if err := lb.SetEncap(e); err == nil {
			t.Errorf("SetEncap(%+v) accepted", e)
		}
	}
}

// TestDecapGUE: xdp_decap strips GUE to its port (outer v4 and v6, inner
// v4 and v6, tagged or not) exactly, counts gue_v4/gue_v6, and leaves
// other UDP alone: another port, no port set, GUE variant 0, a UDP length
// that disagrees with the IP length.
func TestDecapGUE(t *testing.T) {
	objs := testDecap(t)
	d := &Decap{config: objs.DecapConfig}
	must(t, d.SetGUEPort(DefaultGUEPort))
	r := runner{prog: objs.XdpDecap}
	for _, v := range vips {
		for _, dst := range []netip.Addr{be4Near, be6Near} {
			for _, tag := range tags {
				t.Run(fmt.Sprintf("%v/in-%v/%s", v, dst, tag.name), func(t *testing.T) {
					frame, ip := frameSpec{flow: flowTo(v), flags: thACK, tpid: tag.tpid, vlan: tag.vlan}.build()
					l3 := len(frame) - len(ip)
					src := lbSrc4
					k := decapDecapCounterDECAP_GUE_V4
					if dst.Is6() {
						src, k = lbSrc6, decapDecapCounterDECAP_GUE_V6
					}
					in := gueEncapsulated(frame, l3, len(ip), src, dst, macNear, macLB, 50000)
					before := decapCounts(t, objs.DecapCounters)
					ret, out := r.run(t, in)
					if ret != xdpPass {
						t.Fatalf("verdict %s", verdictName(ret))
					}
					sameBytes(t, "decapsulated", out, append(append([]byte{}, in[:12]...), frame[12:]...))
					if after := decapCounts(t, objs.DecapCounters); after[k] != before[k]+1 {
						t.Errorf("counter %d did not move: %v -> %v", k, before, after)
					}
				})
			}
		}
	}
	frame, ip := frameSpec{flow: flowTo(vip4TCP), flags: thACK}.build()
	gue := func(edit func(b []byte)) []byte {
		in := gueEncapsulated(frame, 14, len(ip), lbSrc4, be4Near, macNear, macLB, 50000)
		edit(in[14:])
		return in
	}
	for _, c := range []struct {
		name string
		port uint16
		in   []byte
		want decapDecapCounter
	}{
		{"other port", DefaultGUEPort, gue(func(b []byte) { binary.BigEndian.PutUint16(b[22:], 53) }), decapDecapCounterDECAP_PASS_NOT_ENCAP},
		{"no port set", 0, gue(func([]byte) {}), decapDecapCounterDECAP_PASS_NOT_ENCAP},
		{"variant 0", DefaultGUEPort, gue(func(b []byte) { b[28] = 0 }), decapDecapCounterDECAP_PASS_NOT_ENCAP},
		{"udp length", DefaultGUEPort, gue(func(b []byte) { binary.BigEndian.PutUint16(b[24:], 9) }), decapDecapCounterDECAP_PASS_MALFORMED},
	} {
		t.Run(c.name, func(t *testing.T) {
			must(t, d.SetGUEPort(c.port))
			before := decapCounts(t, objs.DecapCounters)
			ret, out := r.run(t, c.in)
			if ret != xdpPass {
				t.Fatalf("verdict %s", verdictName(ret))
			}
			sameBytes(t, "passed", out, c.in)
			if after := decapCounts(t, objs.DecapCounters); after[c.want] != before[c.want]+1 {
				t.Errorf("counter %d did not move: %v -> %v", c.want, before, after)
			}
		})
	}
}

// decapStats sums the backends' decap counters.
func (e *e2eNet) decapStats(t *testing.T) DecapStats {
	var s DecapStats
	for _, dc := range e.decaps {
		ds, err := dc.Stats()
		must(t, err)
		s.OuterV4 += ds.OuterV4
		s.OuterV6 += ds.OuterV6
		s.GUEV4 += ds.GUEV4
		s.GUEV6 += ds.GUEV6
	}
	return s
}

// TestEndToEndGUE: TCP (1 MiB echo, byte-exact) and UDP through the
// attached balancer with forward = gue and per-flow sources from
// source_prefix4/6, to backends whose xdp_decap strips GUE; the backends'
// counters show GUE of both families and no IP-in-IP.
func TestEndToEndGUE(t *testing.T) {
	e := newE2E(t)
	d := e.d
	must(t, e.lb.SetEncap(Encap{Prefix4: netip.MustParsePrefix("198.18.77.0/24"), Prefix6: netip.MustParsePrefix("2001:db8:77::/64")}))
	for _, dc := range e.decaps {
		must(t, dc.SetGUEPort(DefaultGUEPort))
	}
	for i, c := range []struct {
		vip   netip.Addr
		table []uint32
	}{
		{d.VIP4, []uint32{1, 2}},
		{d.VIP6, []uint32{3, 4}},
		{d.VIP4, []uint32{3, 4}}, // IPv4 clients to IPv6 backends
	} {
		addr := netip.AddrPortFrom(c.vip, 7)
		t.Run(fmt.Sprintf("%v/to-%v", addr, c.table), func(t *testing.T) {
			for j, p := range []l4.Protocol{l4.TCP, l4.UDP} {
				addVIP(t, e.lb, l4.VIPKey{Addr: addr, Proto: p}, uint32(2*i+j), l4.ForwardGUE, l4.HashFiveTuple, c.table)
			}
			for range 3 { // three flows: three outer sources and ports
				if err := e.echoTCP(addr, 1<<20); err != nil {
					t.Fatalf("tcp: %v", err)
				}
			}
			if err := e.echoUDP(addr); err != nil {
				t.Fatalf("udp: %v", err)
			}
		})
	}
	s := e.decapStats(t)
	if s.GUEV4 < 100 || s.GUEV6 < 100 || s.OuterV4+s.OuterV6 != 0 {
		t.Errorf("decap stats %+v: want GUE of both families, no IP-in-IP", s)
	}
	g, _ := e.lb.GlobalStats()
	t.Logf("xdp_lb: %v; decap: %+v", nonZero(g), s)
}
