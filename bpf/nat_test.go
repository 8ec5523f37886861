// forward = "nat": exact frames both ways, checksums recomputed here,
// port ownership under exhaustion, expiry and LRU eviction.

package bpf

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Routes of the NAT tests' clients: behind a router on lb0.
var (
	gw4 = netip.MustParseAddr("198.18.0.254")
	gw6 = netip.MustParseAddr("2001:db8::fe")
)

// natTestPorts is a small NAT port range.
const natLo, natHi = 20000, 20009

// newNATNet is a FIB namespace with routes to the test clients via a
// router on lb0, and a balancer whose NAT addresses are lb0's.
func newNATNet(t testing.TB, lo, hi uint16) (*LB, *fibNet, runner) {
	t.Helper()
	lb := newTestLB(t, testOptions)
	fn := newFibNet(t)
	for _, c := range [][]string{
		{"ip", "neigh", "replace", gw4.String(), "lladdr", macRouter.String(), "dev", "lb0", "nud", "permanent"},
		{"ip", "neigh", "replace", gw6.String(), "lladdr", macRouter.String(), "dev", "lb0", "nud", "permanent"},
		{"ip", "route", "add", "198.18.50.0/24", "via", gw4.String(), "dev", "lb0"},
		{"ip", "route", "add", "2001:db8:50::/64", "via", gw6.String(), "dev", "lb0"},
	} {
		fn.ns.MustExec(t, c...)
	}
	must(t, lb.SetNAT(NATConfig{Enabled: true, Source4: lbSrc4, Source6: lbSrc6, PortLo: lo, PortHi: hi,
		TCPTimeout: time.Minute, UDPTimeout: 30 * time.Second}))
	addBackend(t, lb, 1, be4Near)
	addBackend(t, lb, 2, be6Near)
	return lb, fn, runner{prog: lb.objs.XdpLb, net: fn, ingress: fn.lb0}
}

// natVIP adds v as a nat VIP whose only backend has v's family.
func natVIP(t testing.TB, lb *LB, v l4.VIPKey, index uint32) netip.Addr {
	t.Helper()
	be, idx := be4Near, uint32(1)
	if v.Addr.Addr().Is6() {
		be, idx = be6Near, 2
	}
	addVIP(t, lb, v, index, l4.ForwardNAT, l4.HashFiveTuple, []uint32{idx})
	return be
}

// natSource is lbSrc4 or lbSrc6, by a's family.
func natSource(a netip.Addr) netip.Addr {
	if a.Is4() {
		return lbSrc4
	}
	return lbSrc6
}

// sourcePort reads the L4 source port of a frame whose IP header starts
// at l3.
func sourcePort(frame []byte, l3 int) uint16 {
	hl := 40
	if frame[l3]>>4 == 4 {
		hl = 20
	}
	return binary.BigEndian.Uint16(frame[l3+hl:])
}

// l4Valid recomputes the L4 checksum of an IP packet (pseudo-header
// included): true when it sums to zero, or is a UDP/IPv4 zero checksum.
func l4Valid(ip []byte) bool {
	var src, dst netip.Addr
	var proto uint8
	var seg []byte
	if ip[0]>>4 == 4 {
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		proto, seg = ip[9], ip[20:binary.BigEndian.Uint16(ip[2:])]
		if proto == 17 && binary.BigEndian.Uint16(seg[6:]) == 0 {
			return true
		}
	} else {
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		proto, seg = ip[6], ip[40:40+binary.BigEndian.Uint16(ip[4:])]
	}
	return csumFold(csumAdd(pseudoSum(src, dst, proto, len(seg)), seg)) == 0
}

// natFrame is a frame of flow f with TCP flags, tagged as tag.
func natFrame(f l4.Flow, flags uint8, tpid, vlan uint16) []byte {
	frame, _ := frameSpec{flow: f, flags: flags, tos: 0x10, tpid: tpid, vlan: vlan}.build()
	return frame
}

// expectFrame is the frame the program must send for f: built from the
// RFCs by the test's builders, MACs as given, same tag as the input.
func expectFrame(f l4.Flow, flags uint8, dmac, smac net.HardwareAddr, tpid, vlan uint16) []byte {
	frame := natFrame(f, flags, tpid, vlan)
	copy(frame, dmac)
	copy(frame[6:], smac)
	return frame
}

// TestNATRewrite: a client's packet leaves as NAT address:port ->
// backend, the backend's reply as VIP -> client; every byte as the
// builders make it from scratch, so both checksums are right, for TCP
// and UDP, v4 and v6, untagged and tagged.
func TestNATRewrite(t *testing.T) {
	lb, fn, r := newNATNet(t, natLo, natHi)
	for vi, v := range vips {
		be := natVIP(t, lb, v, uint32(vi))
		for ti, tag := range tags {
			t.Run(fmt.Sprintf("%v/%s", v, tag.name), func(t *testing.T) {
				f := flowTo(v)
				wantNew := uint64(0)
				if ti == 0 {
					wantNew = 1 // the other tags' frames are the same flow's
				}
				l3 := 14
				if tag.vlan != 0 {
					l3 = 18
				}
				var d Counters
				var out []byte
				d = counterDelta(t, lb, func() {
					var ret uint32
					ret, out = r.run(t, natFrame(f, thSYN, tag.tpid, tag.vlan))
					if ret != xdpTX {
						t.Fatalf("forward verdict %s, want TX", verdictName(ret))
					}
				})
				port := sourcePort(out, l3)
				if port < natLo || port > natHi {
					t.Fatalf("nat port %d not in %d-%d", port, natLo, natHi)
				}
				if !l4Valid(out[l3:]) || (be.Is4() && !ipv4HeaderValid(out[l3:])) {
					t.Error("forward: a checksum does not verify")
				}
				toBackend := l4.Flow{Src: netip.AddrPortFrom(natSource(be), port), Dst: netip.AddrPortFrom(be, v.Addr.Port()), Proto: v.Proto}
				sameBytes(t, "forward frame", out, expectFrame(toBackend, thSYN, macNear, fn.mac0, tag.tpid, tag.vlan))
				if m, err := lb.LookupNAT(f); err != nil || m.Source != toBackend.Src {
					t.Errorf("LookupNAT %+v, %v; want %v", m, err, toBackend.Src)
				}
				if d[CounterNATNew] != wantNew {
					t.Errorf("counters %v, want nat_new %d", nonZero(d), wantNew)
				}

				back := l4.Flow{Src: toBackend.Dst, Dst: toBackend.Src, Proto: v.Proto}
				d = counterDelta(t, lb, func() {
					var ret uint32
					ret, out = r.run(t, natFrame(back, thSYN|thACK, tag.tpid, tag.vlan))
					if ret != xdpTX {
						t.Fatalf("reply verdict %s, want TX", verdictName(ret))
					}
				})
				if !l4Valid(out[l3:]) || (be.Is4() && !ipv4HeaderValid(out[l3:])) {
					t.Error("reply: a checksum does not verify")
				}
				toClient := l4.Flow{Src: v.Addr, Dst: f.Src, Proto: v.Proto}
				sameBytes(t, "reply frame", out, expectFrame(toClient, thSYN|thACK, macRouter, fn.mac0, tag.tpid, tag.vlan))
				if d[CounterNATReply] != 1 || d[CounterTX] != 1 {
					t.Errorf("reply counters %v, want nat_reply and tx", nonZero(d))
				}

				// The flow's next packet keeps its port.
				_, out = r.run(t, natFrame(f, thACK, tag.tpid, tag.vlan))
				if got := sourcePort(out, l3); got != port {
					t.Errorf("second packet's nat port %d, want %d", got, port)
				}
			})
		}
	}
}

// TestNATUDPZeroChecksum: a UDP/IPv4 datagram sent without a checksum
// (0) leaves without one both ways; the rest of it is rewritten.
func TestNATUDPZeroChecksum(t *testing.T) {
	lb, _, r := newNATNet(t, natLo, natHi)
	natVIP(t, lb, vip4UDP, 1)
	frame := natFrame(flowTo(vip4UDP), 0, 0, 0)
	binary.BigEndian.PutUint16(frame[14+20+6:], 0)
	ret, out := r.run(t, frame)
	if ret != xdpTX {
		t.Fatalf("verdict %s, want TX", verdictName(ret))
	}
	if c := binary.BigEndian.Uint16(out[14+20+6:]); c != 0 || !ipv4HeaderValid(out[14:]) {
		t.Fatalf("udp checksum %#04x, want 0 (ip header valid: %v)", c, ipv4HeaderValid(out[14:]))
	}
	port := sourcePort(out, 14)
	back := natFrame(l4.Flow{Src: netip.AddrPortFrom(be4Near, 53), Dst: netip.AddrPortFrom(lbSrc4, port), Proto: l4.UDP}, 0, 0, 0)
	binary.BigEndian.PutUint16(back[14+20+6:], 0)
	if ret, out = r.run(t, back); ret != xdpTX {
		t.Fatalf("reply verdict %s, want TX", verdictName(ret))
	}
	if c := binary.BigEndian.Uint16(out[14+20+6:]); c != 0 {
		t.Fatalf("reply udp checksum %#04x, want 0", c)
	}
}

// TestNATExhausted: with two NAT ports, a third flow is dropped and
// counted, and the two flows keep their ports; a mapping idle past its
// timeout gives its port to the next flow, and its old flow then finds
// no port rather than sharing one.
func TestNATExhausted(t *testing.T) {
	lb, _, r := newNATNet(t, natLo, natLo+1)
	natVIP(t, lb, vip4TCP, 1)
	flows := make([]l4.Flow, 3)
	ports := make([]uint16, 3)
	for i := range flows {
		flows[i] = flowTo(vip4TCP)
		flows[i].Src = netip.AddrPortFrom(flows[i].Src.Addr(), uint16(41000+i))
	}
	send := func(i int) (uint32, Counters) {
		var ret uint32
		d := counterDelta(t, lb, func() {
			var out []byte
			ret, out = r.run(t, natFrame(flows[i], thSYN, 0, 0))
			if ret == xdpTX {
				ports[i] = sourcePort(out, 14)
			}
		})
		return ret, d
	}
	for i := range 2 {
		if ret, _ := send(i); ret != xdpTX {
			t.Fatalf("flow %d: verdict %s, want TX", i, verdictName(ret))
		}
	}
	if ports[0] == ports[1] {
		t.Fatalf("two flows share nat port %d", ports[0])
	}
	ret, d := send(2)
	if ret != xdpDrop || d[CounterDropNATFull] != 1 {
		t.Fatalf("third flow: verdict %s, counters %v; want DROP, drop_nat_exhausted", verdictName(ret), nonZero(d))
	}
	vs, _ := lb.VIPStats(1)
	if vs.Drops != 1 {
		t.Errorf("vip drops %d, want 1", vs.Drops)
	}
	for i, want := range ports[:2] {
		if ret, _ := send(i); ret != xdpTX || ports[i] != want {
			t.Fatalf("flow %d after exhaustion: %s port %d, want TX port %d", i, verdictName(ret), ports[i], want)
		}
	}

	// Flow 0 idles past its timeout: flow 2 takes its port.
	age(t, lb, be4Near, lbSrc4, ports[0], 80)
	want := ports[0]
	if ret, d := send(2); ret != xdpTX || ports[2] != want || d[CounterNATReclaimed] != 1 {
		t.Fatalf("after expiry: %s port %d counters %v; want TX on %d, nat_reclaimed", verdictName(ret), ports[2], nonZero(d), want)
	}
	if ret, d := send(0); ret != xdpDrop || d[CounterDropNATFull] != 1 {
		t.Fatalf("expired flow: %s counters %v; want DROP, drop_nat_exhausted (never its old port)", verdictName(ret), nonZero(d))
	}
}

// TestNATEvictedReverse: the LRU dropping a flow's reverse entry frees
// its port for another flow; the first flow's forward entry then no
// longer holds, and it never sends on the port the other flow has.
func TestNATEvictedReverse(t *testing.T) {
	lb, _, r := newNATNet(t, natLo, natLo)
	natVIP(t, lb, vip4UDP, 1)
	a, b := flowTo(vip4UDP), flowTo(vip4UDP)
	b.Src = netip.AddrPortFrom(b.Src.Addr(), 42000)
	if ret, _ := r.run(t, natFrame(a, 0, 0, 0)); ret != xdpTX {
		t.Fatalf("flow a: %s, want TX", verdictName(ret))
	}
	rk := natReverseKey(be4Near, lbSrc4, natLo, 53, l4.UDP)
	must(t, lb.objs.NatReverse.Delete(&rk)) // as an LRU eviction would
	if ret, _ := r.run(t, natFrame(b, 0, 0, 0)); ret != xdpTX {
		t.Fatalf("flow b on the freed port: %s, want TX", verdictName(ret))
	}
	d := counterDelta(t, lb, func() {
		if ret, _ := r.run(t, natFrame(a, 0, 0, 0)); ret != xdpDrop {
			t.Errorf("flow a after its reverse entry went: %s, want DROP", verdictName(ret))
		}
	})
	onlyCounters(t, d, CounterCTHit, CounterDropNATFull)
	// Only a's reverse entry gone, and a's forward entry left: a's next
	// packet puts it back.
	must(t, lb.objs.NatReverse.Delete(&rk))
	if ret, _ := r.run(t, natFrame(a, 0, 0, 0)); ret != xdpTX {
		t.Fatalf("flow a with its port free again: %s, want TX", verdictName(ret))
	}
	var rv lbNatReverse
	must(t, lb.objs.NatReverse.Lookup(&rk, &rv))
	if rv.Flow.flow() != a {
		t.Fatalf("reverse entry names %v, want %v", rv.Flow.flow(), a)
	}
}

// TestNATDisabled: without Enabled a reply to a NAT address passes to
// the kernel untouched, as any packet that is not for a VIP.
func TestNATDisabled(t *testing.T) {
	lb, _, r := newNATNet(t, natLo, natHi)
	natVIP(t, lb, vip4TCP, 1)
	_, out := r.run(t, natFrame(flowTo(vip4TCP), thSYN, 0, 0))
	port := sourcePort(out, 14)
	must(t, lb.SetNAT(NATConfig{Source4: lbSrc4, PortLo: natLo, PortHi: natHi, TCPTimeout: time.Hour, UDPTimeout: time.Minute}))
	back := natFrame(l4.Flow{Src: netip.AddrPortFrom(be4Near, 80), Dst: netip.AddrPortFrom(lbSrc4, port), Proto: l4.TCP}, thACK, 0, 0)
	d := counterDelta(t, lb, func() {
		ret, out := r.run(t, back)
		if ret != xdpPass {
			t.Errorf("verdict %s, want PASS", verdictName(ret))
		}
		sameBytes(t, "passed frame", out, back)
	})
	onlyCounters(t, d, CounterPassNotVIP)
}

// natReverseKey is the reverse key of replies from be:bePort to nat:port.
func natReverseKey(be, nat netip.Addr, port, bePort uint16, proto l4.Protocol) lbFlowKey {
	return flowKeyOf(l4.Flow{Src: netip.AddrPortFrom(be, bePort), Dst: netip.AddrPortFrom(nat, port), Proto: proto})
}

// age makes the mapping on nat:port towards be:bePort look idle for
// longer than any timeout.
func age(t *testing.T, lb *LB, be, nat netip.Addr, port, bePort uint16) {
	t.Helper()
	rk := natReverseKey(be, nat, port, bePort, l4.TCP)
	var rv lbNatReverse
	must(t, lb.objs.NatReverse.Lookup(&rk, &rv))
	rv.LastSeen = 1
	must(t, lb.objs.NatReverse.Put(&rk, &rv))
}
