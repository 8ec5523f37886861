// FuzzXDPLBModes: the forwarding modes issue 26 added (nat, gue with
// per-flow sources, the ICMP too-big answer) under arbitrary bytes.

package bpf

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// modesSeeds are fuzzSeeds plus backend replies to the NAT addresses on
// the first ports of the range (the flows the seeds create hold them).
func modesSeeds() [][]byte {
	seeds := fuzzSeeds()
	for _, v := range vips {
		be, nat := be4Near, lbSrc4
		if v.Addr.Addr().Is6() {
			be, nat = be6Near, lbSrc6
		}
		for port := uint16(natLo); port < natLo+3; port++ {
			f := l4.Flow{Src: netip.AddrPortFrom(be, v.Addr.Port()), Dst: netip.AddrPortFrom(nat, port), Proto: v.Proto}
			seeds = append(seeds, natFrame(f, thACK, 0, 0))
		}
	}
	return seeds
}

// FuzzXDPLBModes: whatever the bytes, with nat VIPs (vip4TCP, vip6UDP),
// gue VIPs (vip4UDP, vip6TCP), per-flow source prefixes and the NAT reply
// path on, the program runs without error and returns PASS, DROP, TX or
// REDIRECT; a PASS leaves the frame as it was; a frame sent on is the
// same length (a NAT rewrite, either way), 28 or 48 bytes longer (GUE),
// or the ICMP too-big answer; a NAT rewrite of a packet with valid
// checksums keeps them valid, and a GUE outer IPv4 header is valid.
func FuzzXDPLBModes(f *testing.F) {
	for _, s := range modesSeeds() {
		f.Add(s)
	}
	lb, _, r := newNATNet(f, natLo, natHi)
	must(f, lb.SetEncap(Encap{Prefix4: netip.MustParsePrefix("198.18.77.0/24"),
		Prefix6: netip.MustParsePrefix("2001:db8:77::/64"), GUEPort: DefaultGUEPort}))
	natVIP(f, lb, vip4TCP, 0)
	natVIP(f, lb, vip6UDP, 3)
	addVIP(f, lb, vip4UDP, 1, l4.ForwardGUE, l4.HashFiveTuple, []uint32{1, 2})
	addVIP(f, lb, vip6TCP, 2, l4.ForwardGUE, l4.HashSrcIP, []uint32{2, 1})
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
			checkModeForwarded(t, in, out)
		case xdpDrop:
		default:
			t.Fatalf("verdict %d", ret)
		}
	})
}

// checkModeForwarded holds the length and checksum rules of
// FuzzXDPLBModes for a frame the program sent on.
func checkModeForwarded(t *testing.T, in, out []byte) {
	t.Helper()
	l3 := 14
	if tpid := binary.BigEndian.Uint16(in[12:]); tpid == 0x8100 || tpid == 0x88a8 {
		l3 = 18
	}
	switch d := len(out) - len(in); {
	case d == 0:
		if _, ok := wellFormed(in[l3:]); ok && checksumsValid(in[l3:]) && !checksumsValid(out[l3:]) {
			t.Fatalf("a rewrite broke valid checksums\n in: %x\nout: %x", in, out)
		}
	case d == 28 || d == 48:
		if out[l3]>>4 == 4 && !ipv4HeaderValid(out[l3:]) {
			t.Fatalf("GUE outer IPv4 checksum invalid: %x", out[l3:l3+20])
		}
		if !bytes.Equal(out[l3+d:], in[l3:]) {
			t.Fatalf("GUE changed the inner packet\n in: %x\nout: %x", in, out)
		}
	case len(out)-l3 == 576 || len(out)-l3 == 1280 || d < 0:
		// The ICMP too-big answer: 576 (v4) or 1280 (v6) bytes of IP, or
		// the whole packet quoted when it is shorter.
		if out[l3]>>4 == 4 && !ipv4HeaderValid(out[l3:]) {
			t.Fatalf("ICMP answer's IPv4 checksum invalid: %x", out[l3:l3+20])
		}
	default:
		t.Fatalf("length %d -> %d\n in: %x\nout: %x", len(in), len(out), in, out)
	}
}

// wellFormed says whether ip is an IPv4 (no options) or IPv6 TCP/UDP
// packet whose lengths fit its bytes, and returns its length.
func wellFormed(ip []byte) (int, bool) {
	n, off, proto, _, ok := ipHeader(ip)
	if !ok || n > len(ip) || (proto != 6 && proto != 17) {
		return 0, false
	}
	min := off + 8
	if proto == 6 {
		min = off + 20
	}
	return n, n >= min
}

// checksumsValid says whether a well-formed packet's IPv4 header (if any)
// and TCP/UDP checksums are valid.
func checksumsValid(ip []byte) bool {
	if _, ok := wellFormed(ip); !ok {
		return false
	}
	if ip[0]>>4 == 4 && !ipv4HeaderValid(ip) {
		return false
	}
	return l4Valid(ip)
}
