// Hand-rolled frame builders and checkers for the XDP tests.

package bpf

import (
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/l4lb/l4lb/l4"
)

// Test MACs: the client side's router and the balancer's own NIC.
var (
	macRouter = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 0x01}
	macLB     = net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 0x02}
)

const (
	thFIN = 0x01
	thSYN = 0x02
	thRST = 0x04
	thPSH = 0x08
	thACK = 0x10
)

// frameSpec describes a test frame: Ethernet (+ optional tag), IP, L4.
type frameSpec struct {
	vlan    uint16 // TCI; 0 = untagged
	tpid    uint16 // tag protocol, default 0x8100
	flow    l4.Flow
	flags   uint8 // TCP flags
	tos     uint8
	payload []byte
}

// ethHeader is dst, src, optional tag, ethertype.
func ethHeader(dst, src net.HardwareAddr, tpid, vlan, etype uint16) []byte {
	b := append(append([]byte{}, dst...), src...)
	if vlan != 0 {
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, vlan)
	}
	return binary.BigEndian.AppendUint16(b, etype)
}

// csumAdd adds b to a ones' complement running sum.
func csumAdd(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

// csumFold folds and complements a running sum.
func csumFold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// ipv4Header is an option-less IPv4 header with a valid checksum.
func ipv4Header(src, dst netip.Addr, proto, tos, ttl uint8, id uint16, payloadLen int) []byte {
	h := make([]byte, 20)
	h[0], h[1] = 0x45, tos
	binary.BigEndian.PutUint16(h[2:], uint16(20+payloadLen))
	binary.BigEndian.PutUint16(h[4:], id)
	h[8], h[9] = ttl, proto
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], csumFold(csumAdd(0, h)))
	return h
}

// ipv6Header is a fixed IPv6 header.
func ipv6Header(src, dst netip.Addr, next, tc, hop uint8, payloadLen int) []byte {
	h := make([]byte, 40)
	binary.BigEndian.PutUint32(h, 6<<28|uint32(tc)<<20)
	binary.BigEndian.PutUint16(h[4:], uint16(payloadLen))
	h[6], h[7] = next, hop
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return h
}

// pseudoSum is the L4 checksum's pseudo-header sum.
func pseudoSum(src, dst netip.Addr, proto uint8, n int) uint32 {
	s, d := src.AsSlice(), dst.AsSlice()
	sum := csumAdd(csumAdd(0, s), d)
	return sum + uint32(proto) + uint32(n)
}

// l4Segment is a TCP (20-byte header) or UDP segment with a valid
// checksum.
func l4Segment(f l4.Flow, flags uint8, payload []byte) []byte {
	var h []byte
	if f.Proto == l4.TCP {
		h = make([]byte, 20)
		binary.BigEndian.PutUint32(h[4:], 0x01020304) // seq
		h[12], h[13] = 5<<4, flags
		binary.BigEndian.PutUint16(h[14:], 65535)
	} else {
		h = make([]byte, 8)
		binary.BigEndian.PutUint16(h[4:], uint16(8+len(payload)))
	}
	binary.BigEndian.PutUint16(h[0:], f.Src.Port())
	binary.BigEndian.PutUint16(h[2:], f.Dst.Port())
	seg := append(h, payload...)
	sum := pseudoSum(f.Src.Addr(), f.Dst.Addr(), uint8(f.Proto), len(seg))
	c := csumFold(csumAdd(sum, seg))
	if f.Proto == l4.UDP && c == 0 {
		c = 0xffff
	}
	off := 16
	if f.Proto == l4.UDP {
		off = 6
	}
	binary.BigEndian.PutUint16(seg[off:], c)
	return seg
}

// ipPacket wraps an L4 payload of protocol proto from src to dst.
func ipPacket(src, dst netip.Addr, proto, tos uint8, l4b []byte) []byte {
	if src.Is4() {
		return append(ipv4Header(src, dst, proto, tos, 64, 0x1234, len(l4b)), l4b...)
	}
	return append(ipv6Header(src, dst, proto, tos, 64, len(l4b)), l4b...)
}

// etherFor is the ethertype of an IP packet.
func etherFor(ip []byte) uint16 {
	if ip[0]>>4 == 4 {
		return 0x0800
	}
	return 0x86dd
}

// frameOf wraps an IP packet in Ethernet from the router to the LB.
func frameOf(ip []byte, tpid, vlan uint16) []byte {
	if tpid == 0 {
		tpid = 0x8100
	}
	return append(ethHeader(macLB, macRouter, tpid, vlan, etherFor(ip)), ip...)
}

// build returns the frame and its IP packet.
func (s frameSpec) build() (frame, ip []byte) {
	payload := s.payload
	if payload == nil {
		payload = []byte("hello, backend")
	}
	seg := l4Segment(s.flow, s.flags, payload)
	ip = ipPacket(s.flow.Src.Addr(), s.flow.Dst.Addr(), uint8(s.flow.Proto), s.tos, seg)
	return frameOf(ip, s.tpid, s.vlan), ip
}

// icmpError is an ICMP (v4 type 3 code 4 / v6 type 2) error from router
// to the VIP quoting quote (a packet the backend sent from the VIP).
func icmpError(router, vip netip.Addr, quote []byte) []byte {
	h := make([]byte, 8)
	if vip.Is4() {
		h[0], h[1] = 3, 4
		binary.BigEndian.PutUint16(h[6:], 1400) // next-hop MTU
		msg := append(h, quote...)
		binary.BigEndian.PutUint16(msg[2:], csumFold(csumAdd(0, msg)))
		return ipPacket(router, vip, 1, 0, msg)
	}
	h[0] = 2
	binary.BigEndian.PutUint32(h[4:], 1400)
	msg := append(h, quote...)
	binary.BigEndian.PutUint16(msg[2:], csumFold(csumAdd(pseudoSum(router, vip, 58, len(msg)), msg)))
	return ipPacket(router, vip, 58, 0, msg)
}

// reply is the packet a backend sends back to the client for flow f
// (DSR: from the VIP).
func reply(f l4.Flow, payload []byte) []byte {
	r := l4.Flow{Src: f.Dst, Dst: f.Src, Proto: f.Proto}
	seg := l4Segment(r, thACK, payload)
	return ipPacket(r.Src.Addr(), r.Dst.Addr(), uint8(r.Proto), 0, seg)
}

// outerHeader is the header the program must push to reach dst from src
// for an inner IP packet: built here from the RFCs, not from the C.
func outerHeader(src, dst netip.Addr, inner []byte) []byte {
	proto := uint8(4)
	var tos uint8
	if inner[0]>>4 == 6 {
		proto = 41
		tos = uint8(binary.BigEndian.Uint16(inner) >> 4)
	} else {
		tos = inner[1]
	}
	if src.Is4() {
		h := ipv4Header(src, dst, proto, tos, 64, 0, len(inner))
		return h
	}
	return ipv6Header(src, dst, proto, tos, 64, len(inner))
}

// encapsulated is the whole frame expected after ipip forwarding of frame
// (whose IP packet starts at l3 and is ipLen long) with the FIB's MACs.
func encapsulated(frame []byte, l3, ipLen int, src, dst netip.Addr, dmac, smac net.HardwareAddr) []byte {
	inner := frame[l3 : l3+ipLen]
	outer := outerHeader(src, dst, inner)
	l2 := append(append(append([]byte{}, dmac...), smac...), frame[12:l3]...)
	binary.BigEndian.PutUint16(l2[l3-2:], etherFor(outer))
	out := append(l2, outer...)
	return append(out, frame[l3:]...)
}

// ipv4HeaderValid checks an IPv4 header's checksum.
func ipv4HeaderValid(h []byte) bool { return csumFold(csumAdd(0, h[:20])) == 0 }
