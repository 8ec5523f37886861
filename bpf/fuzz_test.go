// Native Go fuzzing of both programs through BPF_PROG_TEST_RUN. A plain
// go test runs the seed corpus only; go test -fuzz FuzzXDPLB ./bpf/ explores.

package bpf

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// fuzzMaxFrame keeps inputs inside what BPF_PROG_TEST_RUN accepts for
// XDP without fragments (a page minus head- and tailroom).
const fuzzMaxFrame = 2048

// fuzzSeeds are valid and near-valid frames of every shape the programs
// parse.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	for _, v := range vips {
		for _, tag := range tags {
			for _, fl := range []uint8{thSYN, thACK, thRST | thACK, thFIN | thACK} {
				frame, ip := frameSpec{flow: flowTo(v), flags: fl, tpid: tag.tpid, vlan: tag.vlan}.build()
				seeds = append(seeds, frame)
				src, dst := lbSrc4, be4Near
				if v.Addr.Addr().Is6() {
					src, dst = lbSrc6, be6Near
				}
				seeds = append(seeds, encapsulated(frame, len(frame)-len(ip), len(ip), src, dst, macNear, macLB))
			}
		}
		f := flowTo(v)
		router := router4
		if v.Addr.Addr().Is6() {
			router = router6
		}
		seeds = append(seeds, frameOf(icmpError(router, v.Addr.Addr(), reply(f, []byte("quoted"))), 0, 0))
	}
	for _, c := range passCases() {
		seeds = append(seeds, c.frame)
	}
	// The guard-only (proxy) VIPs of FuzzXDPLB, from a denied and an
	// allowed client, and an ICMP error quoting one of their flows.
	for _, v := range fuzzProxyVIPs {
		for _, src := range []string{"198.18.66.1", "198.18.50.5"} {
			for _, fl := range []uint8{thSYN, thACK, thSYN | thACK} {
				seeds = append(seeds, frame(flowFrom(src, 1234, v), fl))
			}
		}
		quote := reply(flowFrom("198.18.66.1", 1234, v), []byte("quoted"))
		seeds = append(seeds, frameOf(icmpError(router4, v.Addr.Addr(), quote), 0, 0))
	}
	return seeds
}

// fuzzProxyVIPs are guard-only VIPs in FuzzXDPLB.
var fuzzProxyVIPs = []l4.VIPKey{
	{Addr: netip.MustParseAddrPort("198.18.100.2:443"), Proto: l4.TCP},
	{Addr: netip.MustParseAddrPort("198.18.100.2:53"), Proto: l4.UDP},
}

// FuzzXDPLB: whatever the bytes, the program runs without error, returns
// DROP, PASS, TX or REDIRECT, a PASS leaves the frame as it was, and a
// forwarded frame is exactly the frame the RFCs build (checkForwarded).
func FuzzXDPLB(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	lb := newTestLB(f, testOptions)
	fn := newFibNet(f)
	must(f, lb.SetSource(lbSrc4, lbSrc6))
	addBackend(f, lb, 1, be4Near)
	addBackend(f, lb, 2, be6Far)
	for i, v := range vips {
		fwd := l4.ForwardIPIP
		if i%2 == 1 {
			fwd = l4.ForwardL2
		}
		addVIP(f, lb, v, uint32(i), fwd, l4.HashKey(i%3), []uint32{1, 2, 0, 1, 2})
	}
	// Every guard on: access lists (client4 denied on vip4TCP, client6
	// allowed on vip6TCP by a longer network), a new-flow rate, the SYN
	// rate, and guard-only proxy VIPs, whose PASS must leave frames as
	// they came.
	must(f, lb.SetVIP(vip4TCP, VIPEntry{Index: 0, Forward: l4.ForwardIPIP, ACL: mustACL(f, prefixes("198.18.0.0/15"), prefixes("198.18.50.0/24"))}))
	must(f, lb.SetVIP(vip4UDP, VIPEntry{Index: 1, Forward: l4.ForwardL2, HashKey: 1, NewFlowRate: 1}))
	must(f, lb.SetVIP(vip6TCP, VIPEntry{Index: 2, Forward: l4.ForwardIPIP, HashKey: 2, ACL: mustACL(f, prefixes("2001:db8:50::/48"), prefixes("::/0"))}))
	must(f, lb.SetSYNRate(5))
	proxyACL := mustACL(f, nil, prefixes("198.18.66.0/24"))
	for i, v := range fuzzProxyVIPs {
		must(f, lb.SetVIP(v, VIPEntry{Index: uint32(10 + i), GuardOnly: true, ACL: proxyACL}))
	}
	r := runner{prog: lb.objs.XdpLb, net: fn, ingress: fn.lb0}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14 || len(in) > fuzzMaxFrame {
			t.Skip("outside what BPF_PROG_TEST_RUN accepts")
		}
		ret, out, err := r.try(append([]byte{}, in...))
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		switch ret {
		case xdpPass:
			if !bytes.Equal(out, in) {
				t.Fatalf("PASS changed the frame\n in: %x\nout: %x", in, out)
			}
		case xdpTX, xdpRedirect:
			checkForwarded(t, fn, ret, in, out)
		case xdpDrop:
		default:
			t.Fatalf("verdict %d", ret)
		}
	})
}

// checkForwarded: only a packet to a VIP is forwarded, and as the RFCs
// build it, computed here independently of the C: l2 changes the MACs
// alone (to a backend's, from the frame's old destination); ipip adds one
// outer header (valid checksum, lengths of the inner packet, TTL 64, TOS
// copied) towards the backend behind the verdict's interface (TX: be4Near
// on lb0, REDIRECT: be6Far on lb1, as FuzzXDPLB configures them) and
// keeps the inner packet byte for byte.
func checkForwarded(t *testing.T, fn *fibNet, ret uint32, in, out []byte) {
	t.Helper()
	l3 := 14
	if tpid := binary.BigEndian.Uint16(in[12:]); tpid == 0x8100 || tpid == 0x88a8 {
		l3 = 18
	}
	ipLen, ok := toVIP(in[l3:])
	if !ok {
		t.Fatalf("%s of a frame that is not a well-formed packet to a VIP: %x", verdictName(ret), in)
	}
	switch len(out) - len(in) {
	case 0: // l2: only the UDP VIPs (odd indexes) forward so
		if i := indexOfMAC(out[:6]); ret != xdpTX || (i != 1 && i != 2) {
			t.Fatalf("l2: verdict %s to MAC %x", verdictName(ret), out[:6])
		}
		want := append(append(append([]byte{}, out[:6]...), in[:6]...), in[12:]...)
		sameBytes(t, "l2 frame", out, want)
	case 20, 40:
		src, be, dmac, smac := lbSrc4, be4Near, macNear, fn.mac0
		if ret == xdpRedirect {
			src, be, dmac, smac = lbSrc6, be6Far, macFar, fn.mac1
		}
		want := encapsulated(in, l3, ipLen, src, be, dmac, smac)
		sameBytes(t, "ipip frame", out, want)
		if be.Is4() && !ipv4HeaderValid(out[l3:]) {
			t.Errorf("outer IPv4 checksum invalid: %x", out[l3:l3+20])
		}
	default:
		t.Fatalf("%s: length %d -> %d", verdictName(ret), len(in), len(out))
	}
}

// toVIP parses an IP packet the way the verdict table admits it for
// forwarding: IPv4 without options or IPv6, its length within the bytes,
// TCP/UDP to a VIP of FuzzXDPLB, or an ICMP error (v4 type 3, v6 type 1
// or 2) quoting a TCP/UDP packet from a VIP. It returns the packet's
// length by its header.
func toVIP(ip []byte) (int, bool) {
	n, off, proto, dst, ok := ipHeader(ip)
	if !ok || n > len(ip) || n < off+8 {
		return 0, false
	}
	l4b := ip[off:n]
	switch {
	case proto == 6 || proto == 17:
		return n, isVIP(dst, binary.BigEndian.Uint16(l4b[2:]), proto)
	case proto == 1 && l4b[0] == 3, proto == 58 && (l4b[0] == 1 || l4b[0] == 2):
		q := l4b[8:]
		_, qoff, qproto, _, ok := ipHeader(q) // a quote may be cut: its length is the original's
		if !ok || len(q) < qoff+4 || (qproto != 6 && qproto != 17) {
			return 0, false
		}
		src := netip.AddrFrom4([4]byte(q[12:16]))
		if qoff == 40 {
			src = netip.AddrFrom16([16]byte(q[8:24]))
		}
		return n, isVIP(src, binary.BigEndian.Uint16(q[qoff:]), qproto)
	}
	return 0, false
}

// ipHeader reads an IPv4 header without options or an IPv6 header.
func ipHeader(ip []byte) (n, off int, proto uint8, dst netip.Addr, ok bool) {
	switch {
	case len(ip) >= 20 && ip[0] == 0x45:
		return int(binary.BigEndian.Uint16(ip[2:])), 20, ip[9], netip.AddrFrom4([4]byte(ip[16:20])), true
	case len(ip) >= 40 && ip[0]>>4 == 6:
		return 40 + int(binary.BigEndian.Uint16(ip[4:])), 40, ip[6], netip.AddrFrom16([16]byte(ip[24:40])), true
	}
	return 0, 0, 0, netip.Addr{}, false
}

// isVIP says whether addr:port/proto is one of FuzzXDPLB's VIPs.
func isVIP(addr netip.Addr, port uint16, proto uint8) bool {
	for _, v := range vips {
		if v.Addr == netip.AddrPortFrom(addr, port) && uint8(v.Proto) == proto {
			return true
		}
	}
	return false
}

// FuzzXDPDecap: always PASS; the frame is unchanged, or exactly one outer
// IPv4 (20 bytes) or IPv6 (40 bytes) header shorter behind the same MACs,
// or, with GUE on DefaultGUEPort, one outer header and its UDP header
// (28 or 48 bytes) shorter.
func FuzzXDPDecap(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	for _, v := range vips {
		frame, ip := frameSpec{flow: flowTo(v), flags: thACK}.build()
		f.Add(gueEncapsulated(frame, len(frame)-len(ip), len(ip), lbSrc4, be4Near, macNear, macLB, 50000))
		f.Add(gueEncapsulated(frame, len(frame)-len(ip), len(ip), lbSrc6, be6Near, macNear, macLB, 50001))
	}
	objs := testDecap(f)
	must(f, (&Decap{config: objs.DecapConfig}).SetGUEPort(DefaultGUEPort))
	r := runner{prog: objs.XdpDecap}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14 || len(in) > fuzzMaxFrame {
			t.Skip("outside what BPF_PROG_TEST_RUN accepts")
		}
		ret, out, err := r.try(append([]byte{}, in...))
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if ret != xdpPass {
			t.Fatalf("verdict %d", ret)
		}
		switch len(in) - len(out) {
		case 0:
			if !bytes.Equal(out, in) {
				t.Fatalf("frame changed without decapsulation\n in: %x\nout: %x", in, out)
			}
		case 20, 40, 28, 48:
			hdr, l3 := len(in)-len(out), 14
			if tpid := uint16(in[12])<<8 | uint16(in[13]); tpid == 0x8100 || tpid == 0x88a8 {
				l3 = 18
			}
			if !bytes.Equal(out[:l3-2], in[:l3-2]) || !bytes.Equal(out[l3:], in[l3+hdr:]) {
				t.Fatalf("decapsulation changed more than the outer header\n in: %x\nout: %x", in, out)
			}
			if hdr == 28 || hdr == 48 {
				checkGUEDecapsulated(t, in[l3:], out[l3-2:], hdr)
			} else {
				checkDecapsulated(t, in[l3:], out[l3-2:], hdr)
			}
		default:
			t.Fatalf("length %d -> %d", len(in), len(out))
		}
	})
}

// checkDecapsulated: only what the verdict table names is stripped (an
// outer IPv4 header without options, not a fragment, or an outer IPv6
// header, carrying IPv4 or IPv6: protocol 4 or 41, the size of its own
// version), and the EtherType then names the inner packet's version.
func checkDecapsulated(t *testing.T, outer, out []byte, hdr int) {
	t.Helper()
	var proto uint8
	switch {
	case hdr == 20 && outer[0] == 0x45 && binary.BigEndian.Uint16(outer[6:])&0x3fff == 0:
		proto = outer[9]
	case hdr == 40 && outer[0]>>4 == 6:
		proto = outer[6]
	default:
		t.Fatalf("stripped %d bytes of a header that is not an outer IPv4/IPv6 header: %x", hdr, outer[:hdr])
	}
	inner := out[2:]
	want := map[uint8]struct {
		version uint8
		etype   uint16
	}{4: {4, 0x0800}, 41: {6, 0x86dd}}[proto]
	if want.version == 0 || len(inner) == 0 || inner[0]>>4 != want.version {
		t.Fatalf("stripped an outer header with protocol %d from %x", proto, outer)
	}
	if etype := binary.BigEndian.Uint16(out); etype != want.etype {
		t.Fatalf("EtherType %#04x after decapsulating protocol %d", etype, proto)
	}
}

// checkGUEDecapsulated: a GUE strip removed an outer IPv4 (no options, not
// a fragment) or IPv6 header carrying UDP to DefaultGUEPort whose length
// covers the rest, and the EtherType names the inner packet's version.
func checkGUEDecapsulated(t *testing.T, outer, out []byte, hdr int) {
	t.Helper()
	ipHdr := hdr - 8
	switch {
	case ipHdr == 20 && outer[0] == 0x45 && binary.BigEndian.Uint16(outer[6:])&0x3fff == 0 && outer[9] == 17:
	case ipHdr == 40 && outer[0]>>4 == 6 && outer[6] == 17:
	default:
		t.Fatalf("stripped %d bytes of a header that is not outer IP + UDP: %x", hdr, outer[:hdr])
	}
	udp := outer[ipHdr:hdr]
	if port := binary.BigEndian.Uint16(udp[2:]); port != DefaultGUEPort {
		t.Fatalf("stripped UDP to port %d, not the GUE port", port)
	}
	inner := out[2:]
	if len(inner) == 0 {
		t.Fatalf("GUE strip left no inner packet")
	}
	want := map[uint8]uint16{4: 0x0800, 6: 0x86dd}[inner[0]>>4]
	if etype := binary.BigEndian.Uint16(out); want == 0 || etype != want {
		t.Fatalf("EtherType %#04x after decapsulating GUE carrying version %d", etype, inner[0]>>4)
	}
}
