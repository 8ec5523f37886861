// Batched datagram I/O (recvmmsg/sendmmsg) with preallocated headers,
// addresses and control buffers, so a datagram costs no allocation.

package proxy

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxDatagram is the largest UDP payload (IPv4: 65535 - 8 - 20). A bigger
// read buffer lets MSG_TRUNC mark anything larger as truncated.
const maxDatagram = 65507

// oobSize holds one IPv6 packet-info control message (the larger family).
var oobSize = unix.CmsgSpace(unix.SizeofInet6Pktinfo)

// msgBatch is a reusable set of message headers for recvmmsg/sendmmsg.
// Buffers are fixed at creation: the kernel holds pointers into them only
// during a call.
type msgBatch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	oob   []byte
	bufs  []byte
	size  int // bytes per message buffer
}

func newMsgBatch(n, size int) *msgBatch {
	b := &msgBatch{
		hdrs:  make([]unix.Mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n),
		oob:   make([]byte, n*oobSize),
		bufs:  make([]byte, n*size),
		size:  size,
	}
	for i := range b.hdrs {
		b.iovs[i].Base = &b.bufs[i*size]
	}
	return b
}

// buf returns message i's whole buffer.
func (b *msgBatch) buf(i int) []byte { return b.bufs[i*b.size : (i+1)*b.size] }

// payload returns what recvmmsg put in message i.
func (b *msgBatch) payload(i int) []byte { return b.bufs[i*b.size : i*b.size+int(b.hdrs[i].Len)] }

// truncated reports whether message i was larger than its buffer.
func (b *msgBatch) truncated(i int) bool { return b.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 }

// prepRecv readies the first n headers for recvmmsg, with room for the
// source address (withName) and packet info (withOOB).
func (b *msgBatch) prepRecv(n int, withName, withOOB bool) {
	for i := 0; i < n; i++ {
		h := &b.hdrs[i].Hdr
		h.Iov, h.Iovlen = &b.iovs[i], 1
		b.iovs[i].SetLen(b.size)
		h.Name, h.Namelen = nil, 0
		if withName {
			h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
			h.Namelen = unix.SizeofSockaddrInet6
		}
		h.Control = nil
		h.SetControllen(0)
		if withOOB {
			h.Control = &b.oob[i*oobSize]
			h.SetControllen(oobSize)
		}
		h.Flags = 0
		b.hdrs[i].Len = 0
	}
}

// prepRecvAt readies headers [from, from+n) for recvmmsg on a connected
// socket (no address, no packet info), each with its own buffer.
func (b *msgBatch) prepRecvAt(from, n int) {
	for i := from; i < from+n; i++ {
		h := &b.hdrs[i].Hdr
		h.Iov, h.Iovlen = &b.iovs[i], 1
		b.iovs[i].SetLen(b.size)
		h.Name, h.Namelen = nil, 0
		h.Control = nil
		h.SetControllen(0)
		h.Flags = 0
		b.hdrs[i].Len = 0
	}
}

// prepSend readies message i to carry its first n buffer bytes to dst, from
// src when src is valid (a wildcard listener must name its source).
func (b *msgBatch) prepSend(i, n int, dst netip.AddrPort, src netip.Addr) {
	h := &b.hdrs[i].Hdr
	h.Iov, h.Iovlen = &b.iovs[i], 1
	b.iovs[i].SetLen(n)
	h.Namelen = putSockaddr(&b.names[i], dst)
	h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
	h.Control = nil
	h.SetControllen(0)
	if src.IsValid() {
		oob := b.oob[i*oobSize : (i+1)*oobSize]
		l := putPktinfo(oob, src)
		h.Control = &oob[0]
		h.SetControllen(l)
	}
	h.Flags = 0
}

// source returns message i's source address.
func (b *msgBatch) source(i int) netip.AddrPort { return getSockaddr(&b.names[i]) }

// destination returns the local address message i was sent to, from its
// packet info, or false when there is none.
func (b *msgBatch) destination(i int) (netip.Addr, bool) {
	h := &b.hdrs[i].Hdr
	oob := b.oob[i*oobSize : i*oobSize+int(h.Controllen)]
	return parsePktinfo(oob)
}

func recvmmsg(fd int, hdrs []unix.Mmsghdr) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func sendmmsg(fd int, hdrs []unix.Mmsghdr) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// putSockaddr writes a into sa (sockaddr_in or sockaddr_in6) and returns its length.
func putSockaddr(sa *unix.RawSockaddrInet6, a netip.AddrPort) uint32 {
	if a.Addr().Is4() {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*s4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Addr().As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&s4.Port))[:], a.Port())
		return unix.SizeofSockaddrInet4
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.Addr().As16()}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], a.Port())
	return unix.SizeofSockaddrInet6
}

func getSockaddr(sa *unix.RawSockaddrInet6) netip.AddrPort {
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	if sa.Family == unix.AF_INET {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
}

// putPktinfo writes an IP_PKTINFO / IPV6_PKTINFO control message naming src
// as the source address and returns its length.
func putPktinfo(oob []byte, src netip.Addr) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	data := oob[unix.CmsgLen(0):]
	if src.Is4() {
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
		*pi = unix.Inet4Pktinfo{Spec_dst: src.As4()}
		return unix.CmsgSpace(unix.SizeofInet4Pktinfo)
	}
	h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
	h.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
	pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
	*pi = unix.Inet6Pktinfo{Addr: src.As16()}
	return unix.CmsgSpace(unix.SizeofInet6Pktinfo)
}

// parsePktinfo finds the destination address in received control messages
// without allocating.
func parsePktinfo(oob []byte) (netip.Addr, bool) {
	hdrLen := unix.CmsgLen(0)
	for len(oob) >= hdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdrLen || l > len(oob) {
			return netip.Addr{}, false
		}
		data := oob[hdrLen:l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			return netip.AddrFrom4(pi.Addr), true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			return netip.AddrFrom16(pi.Addr).Unmap(), true
		}
		next := unix.CmsgSpace(l - hdrLen)
		if next > len(oob) {
			break
		}
		oob = oob[next:]
	}
	return netip.Addr{}, false
}
