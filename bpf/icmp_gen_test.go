// ICMP "fragmentation needed" / "packet too big" answers to packets that
// would exceed the MTU once encapsulated: bytes, refusals, rate, and a
// client whose path MTU discovery completes a transfer end to end.

package bpf

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// tooBigReply is the answer expected to ip (the client's packet, at l3 in
// frame), built from RFCs 792, 1812 and 4443, not from the C: Ethernet
// back to the sender, IP from the VIP to the client, the ICMP header with
// the MTU, and the quote (576 bytes in all for IPv4, 1280 for IPv6).
func tooBigReply(frame []byte, l3 int, ip []byte, mtu int) []byte {
	src, dst := netip.AddrFrom4([4]byte(ip[16:20])), netip.AddrFrom4([4]byte(ip[12:16]))
	quote := 576 - 28
	if ip[0]>>4 == 6 {
		src, dst = netip.AddrFrom16([16]byte(ip[24:40])), netip.AddrFrom16([16]byte(ip[8:24]))
		quote = 1280 - 48
	}
	icmp := make([]byte, 8)
	var hdr []byte
	if src.Is4() {
		icmp[0], icmp[1] = 3, 4
		binary.BigEndian.PutUint16(icmp[6:], uint16(mtu))
		icmp = append(icmp, ip[:quote]...)
		binary.BigEndian.PutUint16(icmp[2:], csumFold(csumAdd(0, icmp)))
		hdr = ipv4Header(src, dst, 1, 0xc0, 64, 0, len(icmp))
	} else {
		icmp[0] = 2
		binary.BigEndian.PutUint32(icmp[4:], uint32(mtu))
		icmp = append(icmp, ip[:quote]...)
		binary.BigEndian.PutUint16(icmp[2:], csumFold(csumAdd(pseudoSum(src, dst, 58, len(icmp)), icmp)))
		hdr = ipv6Header(src, dst, 58, 0, 64, len(icmp))
	}
	l2 := append(append(append([]byte{}, macRouter...), macLB...), frame[12:l3]...)
	return append(append(l2, hdr...), icmp...)
}

// fullSize is a TCP segment to v whose IP packet is 1500 bytes.
func fullSize(v l4.VIPKey, tpid, vlan uint16) (frame, ip []byte) {
	n := 1500 - 20 - 20
	if v.Addr.Addr().Is6() {
		n = 1500 - 40 - 20
	}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i*7 + 1) // no zero stretch: a checksum that skips bytes shows
	}
	return frameSpec{flow: flowTo(v), flags: thACK, payload: payload, tpid: tpid, vlan: vlan}.build()
}

// TestTooBigAnswered: a 1500-byte packet that the 1500-byte link toward
// its backend cannot carry encapsulated is answered, not dropped: the
// frame leaves by XDP_TX as the ICMP error to the client, from the VIP,
// with the MTU the link leaves for the inner packet (1500 minus 20 for
// IPIP to IPv4, 40 to IPv6, 8 more for GUE), checksums right, quoting the
// client's packet; counted icmp_too_big_sent and as a drop of the VIP.
func TestTooBigAnswered(t *testing.T) {
	lb, _, r := fibLB(t)
	addBackend(t, lb, 1, be4Near)
	addBackend(t, lb, 2, be6Near)
	for _, c := range []struct {
		vip     l4.VIPKey
		fwd     l4.Forward
		backend uint32
		mtu     int
	}{
		{vip4TCP, l4.ForwardIPIP, 1, 1480},
		{vip4TCP, l4.ForwardIPIP, 2, 1460},
		{vip6TCP, l4.ForwardIPIP, 2, 1460},
		{vip6TCP, l4.ForwardIPIP, 1, 1480},
		{vip4TCP, l4.ForwardGUE, 1, 1472},
		{vip6TCP, l4.ForwardGUE, 2, 1452},
	} {
		for _, tag := range tags[:2] {
			t.Run(fmt.Sprintf("%v/%v/to-%d/%s", c.vip, c.fwd, c.backend, tag.name), func(t *testing.T) {
				addVIP(t, lb, c.vip, 1, c.fwd, l4.HashFiveTuple, []uint32{c.backend})
				if _, err := lb.PurgeVIP(c.vip); err != nil { // the flow stays pinned otherwise
					t.Fatal(err)
				}
				frame, ip := fullSize(c.vip, tag.tpid, tag.vlan)
				vs0, _ := lb.VIPStats(1)
				var out []byte
				d := counterDelta(t, lb, func() {
					var ret uint32
					if ret, out = r.run(t, frame); ret != xdpTX {
						t.Fatalf("verdict %s, want TX", verdictName(ret))
					}
				})
				if d[CounterICMPTooBig] != 1 || d[CounterDropTooBig] != 0 || d[CounterTX] != 0 {
					t.Errorf("counters %v, want icmp_too_big_sent", nonZero(d))
				}
				l3 := len(frame) - len(ip)
				sameBytes(t, "reply", out, tooBigReply(frame, l3, ip, c.mtu))
				if ip[0]>>4 == 4 && !ipv4HeaderValid(out[l3:]) {
					t.Error("reply's IPv4 checksum invalid")
				}
				if vs1, _ := lb.VIPStats(1); vs1.Drops != vs0.Drops+1 || vs1.Packets != vs0.Packets {
					t.Errorf("vip stats %+v -> %+v, want one more drop", vs0, vs1)
				}
			})
		}
	}
}

// TestTooBigNotAnswered: an ICMP error that would exceed the MTU is
// dropped unanswered (RFC 1122: never an error about an error); answers
// stop at the rate (1000 a second, a second's burst), the rest drop.
func TestTooBigNotAnswered(t *testing.T) {
	lb, _, r := fibLB(t)
	addBackend(t, lb, 1, be4Near)
	addVIP(t, lb, vip4TCP, 1, l4.ForwardIPIP, l4.HashFiveTuple, []uint32{1})

	icmp := frameOf(icmpError(netip.MustParseAddr("198.18.9.9"), vip4TCP.Addr.Addr(), reply(flowTo(vip4TCP), make([]byte, 1440))), 0, 0)
	d := counterDelta(t, lb, func() {
		if ret, _ := r.run(t, icmp); ret != xdpDrop {
			t.Errorf("too big ICMP error: verdict %s, want DROP", verdictName(ret))
		}
	})
	if d[CounterDropTooBig] != 1 || d[CounterICMPTooBig] != 0 {
		t.Errorf("too big ICMP error: counters %v", nonZero(d))
	}

	frame, _ := fullSize(vip4TCP, 0, 0)
	const n = 3000
	start := time.Now()
	d = counterDelta(t, lb, func() {
		for range n {
			r.run(t, frame)
		}
	})
	elapsed := time.Since(start)
	sent, dropped := d[CounterICMPTooBig], d[CounterDropTooBig]
	if allowed := uint64(1000 + elapsed.Milliseconds() + 10); sent+dropped != n || dropped == 0 || sent > allowed {
		t.Errorf("%d too-big packets in %v: %d answered (at most %d), %d dropped", n, elapsed, sent, allowed, dropped)
	}
}

// TestEndToEndTooBig: the links from the balancer to the backends have
// the clients' MTU (1500), so a full-size segment cannot be encapsulated;
// the client, with path MTU discovery on (Linux's default), gets the
// answer, lowers its packet size, and 1 MiB echoes complete byte for byte
// through ipip (IPv4 and IPv6) and gue. Without the answer every full
// segment would be dropped and the transfer would stall.
func TestEndToEndTooBig(t *testing.T) {
	e := newE2EWith(t, testutil.DSROptions{Backends: 2, IPv6: true, MTU: 1500, ClientMTU: 1500})
	d := e.d
	must(t, e.lb.SetEncap(Encap{}))
	for _, dc := range e.decaps {
		must(t, dc.SetGUEPort(DefaultGUEPort))
	}
	for i, c := range []struct {
		vip   netip.Addr
		port  uint16
		fwd   l4.Forward
		table []uint32
	}{
		{d.VIP4, 7, l4.ForwardIPIP, []uint32{1, 2}},
		{d.VIP6, 7, l4.ForwardIPIP, []uint32{3, 4}},
		{d.VIP4, 8, l4.ForwardGUE, []uint32{1, 2}},
	} {
		addr := netip.AddrPortFrom(c.vip, c.port)
		t.Run(fmt.Sprintf("%v/%v", c.fwd, addr), func(t *testing.T) {
			if c.port != 7 {
				for _, b := range d.Backends {
					startEchoOn(t, b, c.port)
				}
			}
			addVIP(t, e.lb, l4.VIPKey{Addr: addr, Proto: l4.TCP}, uint32(i), c.fwd, l4.HashFiveTuple, c.table)
			delta := counterDelta(t, e.lb, func() {
				if err := e.echoTCP(addr, 1<<20); err != nil {
					t.Fatalf("tcp: %v", err)
				}
			})
			if delta[CounterICMPTooBig] == 0 {
				t.Errorf("no too-big answer sent (counters %v): the path was not too small", nonZero(delta))
			}
		})
	}
}

// startEchoOn runs a TCP echo server on port of every address of h.
func startEchoOn(t *testing.T, h *testutil.DSRHost, port uint16) {
	h.NS.MustDo(t, func() error {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			return err
		}
		t.Cleanup(func() { ln.Close() })
		go testutil.ServeConns(ln, testutil.Echo)
		return nil
	})
}
