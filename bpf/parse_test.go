// Parsing: everything the balancer does not own passes untouched, with the
// documented counter; malformed and truncated frames never crash it.

package bpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// fixIPv4 recomputes the checksum of the IPv4 header at ip.
func fixIPv4(ip []byte) {
	n := int(ip[0]&0xf) * 4
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], csumFold(csumAdd(0, ip[:n])))
}

// v4 is a TCP SYN to vip4TCP; edit changes its IP packet (at 14).
func v4(edit func(ip []byte) []byte) []byte {
	frame, ip := frameSpec{flow: flowTo(vip4TCP), flags: thSYN}.build()
	return append(frame[:len(frame)-len(ip)], edit(append([]byte{}, ip...))...)
}

// v6 is a UDP datagram to vip6UDP; edit changes its IP packet.
func v6(edit func(ip []byte) []byte) []byte {
	frame, ip := frameSpec{flow: flowTo(vip6UDP)}.build()
	return append(frame[:len(frame)-len(ip)], edit(append([]byte{}, ip...))...)
}

// withOptions inserts a 4-byte option (NOPs) into an IPv4 header.
func withOptions(ip []byte) []byte {
	out := append(append(append([]byte{}, ip[:20]...), 1, 1, 1, 1), ip[20:]...)
	out[0] = 0x46
	binary.BigEndian.PutUint16(out[2:], uint16(len(out)))
	fixIPv4(out)
	return out
}

// withExt inserts an 8-byte extension header of type next into IPv6.
func withExt(next uint8) func([]byte) []byte {
	return func(ip []byte) []byte {
		ext := []byte{ip[6], 0, 0, 0, 0, 0, 0, 0}
		out := append(append(append([]byte{}, ip[:40]...), ext...), ip[40:]...)
		out[6] = next
		binary.BigEndian.PutUint16(out[4:], uint16(len(out)-40))
		return out
	}
}

// set16 sets a big-endian field (and fixes an IPv4 checksum if asked).
func set16(off int, v uint16, fix bool) func([]byte) []byte {
	return func(ip []byte) []byte {
		binary.BigEndian.PutUint16(ip[off:], v)
		if fix {
			fixIPv4(ip)
		}
		return ip
	}
}

func setByte(off int, v byte, fix bool) func([]byte) []byte {
	return func(ip []byte) []byte {
		ip[off] = v
		if fix {
			fixIPv4(ip)
		}
		return ip
	}
}

// rawFrame wraps an IP packet of any protocol to dst.
func rawFrame(src, dst netip.Addr, proto uint8, l4b []byte) []byte {
	return frameOf(ipPacket(src, dst, proto, 0, l4b), 0, 0)
}

func passCases() []struct {
	name  string
	frame []byte
	want  Counter
} {
	v4a, v4b := client4.Addr(), vip4TCP.Addr.Addr()
	v6a, v6b := client6.Addr(), vip6TCP.Addr.Addr()
	_, ip := frameSpec{flow: flowTo(vip4TCP)}.build()
	// Outer 802.1ad tag, then an inner 802.1Q tag (TCI 6) before IPv4.
	qinq := append(append(ethHeader(macLB, macRouter, 0x88a8, 5, 0x8100), 0, 6, 0x08, 0x00), ip...)
	other := l4.Flow{Src: client4, Dst: netip.AddrPortFrom(v4b, 81), Proto: l4.TCP}
	notVIPFrame, _ := frameSpec{flow: other, flags: thSYN}.build()
	wrongProto, _ := frameSpec{flow: l4.Flow{Src: client4, Dst: vip4TCP.Addr, Proto: l4.UDP}}.build()
	otherAddr, _ := frameSpec{flow: l4.Flow{Src: client4, Dst: netip.MustParseAddrPort("198.18.100.2:80"), Proto: l4.TCP}}.build()
	echo4 := []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0}
	echo6 := []byte{128, 0, 0, 0, 0, 1, 0, 1}
	ns6 := append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, v6b.AsSlice()...)
	return []struct {
		name  string
		frame []byte
		want  Counter
	}{
		{"arp", append(ethHeader(macLB, macRouter, 0, 0, 0x0806), make([]byte, 28)...), CounterPassNotIP},
		{"qinq", qinq, CounterPassNotIP},
		{"not vip port", notVIPFrame, CounterPassNotVIP},
		{"not vip proto", wrongProto, CounterPassNotVIP},
		{"not vip addr", otherAddr, CounterPassNotVIP},
		{"v4 options", v4(withOptions), CounterPassIPOptions},
		{"v4 more fragments", v4(set16(6, 0x2000, true)), CounterPassFragment},
		{"v4 fragment offset", v4(set16(6, 0x0001, true)), CounterPassFragment},
		{"v4 tot_len beyond frame", v4(set16(2, 200, true)), CounterPassBadLength},
		{"v4 tot_len below header", v4(set16(2, 19, true)), CounterPassBadLength},
		{"v4 tot_len cuts tcp", v4(set16(2, 30, true)), CounterPassBadLength},
		{"v4 version 6", v4(setByte(0, 0x65, true)), CounterPassBadHeader},
		{"v4 ihl 4", v4(setByte(0, 0x44, true)), CounterPassBadHeader},
		{"tcp doff 4", v4(setByte(32, 0x40, false)), CounterPassBadHeader},
		{"v4 gre", rawFrame(v4a, v4b, 47, make([]byte, 24)), CounterPassOtherProto},
		{"v4 sctp", rawFrame(v4a, v4b, 132, make([]byte, 24)), CounterPassOtherProto},
		{"v4 icmp echo", rawFrame(v4a, v4b, 1, echo4), CounterPassICMP},
		{"v6 hop-by-hop", v6(withExt(0)), CounterPassIPv6Ext},
		{"v6 fragment", v6(withExt(44)), CounterPassIPv6Ext},
		{"v6 routing", v6(withExt(43)), CounterPassIPv6Ext},
		{"v6 dstopts", v6(withExt(60)), CounterPassIPv6Ext},
		{"v6 payload beyond frame", v6(set16(4, 500, false)), CounterPassBadLength},
		{"v6 payload cuts udp", v6(set16(4, 4, false)), CounterPassBadLength},
		{"v6 version 4", v6(setByte(0, 0x40, false)), CounterPassBadHeader},
		{"v6 no next header", rawFrame(v6a, v6b, 59, nil), CounterPassOtherProto},
		{"v6 icmp echo", rawFrame(v6a, v6b, 58, echo6), CounterPassICMP},
		{"v6 neighbour solicitation", rawFrame(v6a, v6b, 58, ns6), CounterPassICMP},
	}
}

// TestPassUntouched: frames the balancer does not own pass byte for byte
// with exactly their counter.
func TestPassUntouched(t *testing.T) {
	lb := newTestLB(t, testOptions)
	r := runner{prog: lb.objs.XdpLb}
	addBackend(t, lb, 1, netip.MustParseAddr("198.18.0.11"))
	for i, v := range vips {
		addVIP(t, lb, v, uint32(i), l4.ForwardL2, l4.HashFiveTuple, []uint32{1})
	}
	for _, c := range passCases() {
		t.Run(c.name, func(t *testing.T) {
			d := counterDelta(t, lb, func() {
				ret, out := r.run(t, c.frame)
				if ret != xdpPass {
					t.Errorf("verdict %s, want PASS", verdictName(ret))
				}
				sameBytes(t, "frame", out, c.frame)
			})
			onlyCounters(t, d, c.want)
		})
	}
}

// TestForwardedEdgeCases: shapes that look odd but are ours: DF set,
// Ethernet padding after a short packet (kept as trailing bytes).
func TestForwardedEdgeCases(t *testing.T) {
	lb := newTestLB(t, testOptions)
	r := runner{prog: lb.objs.XdpLb}
	addBackend(t, lb, 1, netip.MustParseAddr("198.18.0.11"))
	addVIP(t, lb, vip4TCP, 0, l4.ForwardL2, l4.HashFiveTuple, []uint32{1})
	addVIP(t, lb, vip4UDP, 1, l4.ForwardL2, l4.HashFiveTuple, []uint32{1})
	short, _ := frameSpec{flow: flowTo(vip4UDP), payload: []byte{}}.build()
	for name, frame := range map[string][]byte{
		"dont fragment": v4(set16(6, 0x4000, true)),
		"padded":        append(short, make([]byte, 60-len(short))...),
	} {
		t.Run(name, func(t *testing.T) {
			ret, out := r.run(t, frame)
			if ret != xdpTX {
				t.Fatalf("verdict %s, want TX", verdictName(ret))
			}
			sameBytes(t, "after the MACs", out[12:], frame[12:])
		})
	}
}

// TestTruncated cuts valid frames at every length from 14 bytes (the
// kernel's minimum) and checks: PASS, bytes unchanged, and the counter
// the verdict table names: a header cut off is pass_truncated; a cut
// beyond the IP header makes the IP length lie, pass_bad_length.
func TestTruncated(t *testing.T) {
	lb := newTestLB(t, testOptions)
	r := runner{prog: lb.objs.XdpLb}
	addBackend(t, lb, 1, netip.MustParseAddr("198.18.0.11"))
	for i, v := range vips {
		addVIP(t, lb, v, uint32(i), l4.ForwardL2, l4.HashFiveTuple, []uint32{1})
	}
	for _, v := range vips {
		for _, tag := range tags {
			frame, ip := frameSpec{flow: flowTo(v), tpid: tag.tpid, vlan: tag.vlan}.build()
			l3 := len(frame) - len(ip)
			ipHdr := 20
			if v.Addr.Addr().Is6() {
				ipHdr = 40
			}
			t.Run(fmt.Sprintf("%v/%s", v, tag.name), func(t *testing.T) {
				for n := 14; n < len(frame); n++ {
					cut := append([]byte{}, frame[:n]...)
					want := CounterPassBadLength
					if n < l3+ipHdr {
						want = CounterPassTruncated
					}
					d := counterDelta(t, lb, func() {
						ret, out := r.run(t, cut)
						if ret != xdpPass {
							t.Errorf("cut %d: verdict %s", n, verdictName(ret))
						}
						sameBytes(t, fmt.Sprintf("cut %d", n), out, cut)
					})
					if d[want] != 1 {
						t.Errorf("cut %d: counters %v, want %v", n, nonZero(d), want)
					}
				}
			})
		}
	}
}
