// The wire format: header, flows, HMAC-SHA256.

package flowsync

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// Wire constants (version 1).
const (
	Version    = 1
	HeaderLen  = 32
	EntryLen   = 64
	MACLen     = sha256.Size
	MaxEntries = 20 // a datagram stays under 1400 bytes
	MaxLen     = HeaderLen + MaxEntries*EntryLen + MACLen
	kindFlows  = 1
	// MaxAge is the largest age a flow can carry (a uint32 of ms).
	MaxAge = time.Duration(1<<32-1) * time.Millisecond
)

var magic = [4]byte{'L', '4', 'F', 'S'}

// Entry flags.
const (
	flagClosing  = 1 << 0
	flagFlow4    = 1 << 1 // client and VIP are IPv4
	flagBackend4 = 1 << 2 // the backend is IPv4
	// flagPin: a proxy VIP's affinity pin (TCP, client port 0, never
	// closing). A receiver that predates it refuses the entry alone (an
	// unknown flag) and counts it malformed: no version change needed.
	flagPin = 1 << 3
)

// Why Decode refused a datagram; callers count them by kind.
var (
	ErrMalformed = errors.New("flowsync: malformed datagram")
	ErrVersion   = errors.New("flowsync: unknown version")
	ErrAuth      = errors.New("flowsync: HMAC does not match")
)

// Header is a datagram's header.
type Header struct {
	Sender uint64 // random per process: the replay state is per sender
	Seq    uint64 // from 1, one per datagram
	Time   int64  // the sender's wall clock, Unix nanoseconds
}

// codec encodes and decodes datagrams under one key. Not safe for
// concurrent use: each goroutine has its own.
type codec struct {
	mac hash.Hash
	sum [MACLen]byte
}

func newCodec(key []byte) *codec { return &codec{mac: hmac.New(sha256.New, key)} }

// encode writes a datagram of h and flows (at most MaxEntries) into buf
// (at least MaxLen) and returns its length.
func (c *codec) encode(buf []byte, h Header, flows []plane.SyncedFlow) int {
	copy(buf[0:4], magic[:])
	buf[4], buf[5] = Version, kindFlows
	binary.BigEndian.PutUint16(buf[6:], uint16(len(flows)))
	binary.BigEndian.PutUint64(buf[8:], h.Sender)
	binary.BigEndian.PutUint64(buf[16:], h.Seq)
	binary.BigEndian.PutUint64(buf[24:], uint64(h.Time))
	n := HeaderLen
	for i := range flows {
		putEntry(buf[n:n+EntryLen], &flows[i])
		n += EntryLen
	}
	c.mac.Reset()
	c.mac.Write(buf[:n])
	c.mac.Sum(c.sum[:0])
	copy(buf[n:], c.sum[:])
	return n + MACLen
}

func putEntry(b []byte, f *plane.SyncedFlow) {
	clear(b)
	b[0] = uint8(f.Flow.Proto)
	if f.Closing {
		b[1] |= flagClosing
	}
	if f.Flow.Src.Addr().Is4() {
		b[1] |= flagFlow4
	}
	if f.Backend.Addr().Is4() {
		b[1] |= flagBackend4
	}
	if f.Pin {
		b[1] |= flagPin
	}
	binary.BigEndian.PutUint32(b[4:], uint32(min(max(f.Age, 0), MaxAge)/time.Millisecond))
	a := f.Flow.Src.Addr().As16()
	copy(b[8:24], a[:])
	binary.BigEndian.PutUint16(b[24:], f.Flow.Src.Port())
	binary.BigEndian.PutUint16(b[26:], f.Flow.Dst.Port())
	binary.BigEndian.PutUint16(b[28:], f.Backend.Port())
	a = f.Flow.Dst.Addr().As16()
	copy(b[32:48], a[:])
	a = f.Backend.Addr().As16()
	copy(b[48:64], a[:])
}

// decode checks a datagram (length, magic, version, HMAC) and returns
// its header and entries (a sub-slice of b). It does not allocate.
func (c *codec) decode(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < HeaderLen+MACLen || [4]byte(b[0:4]) != magic {
		return h, nil, ErrMalformed
	}
	if b[4] != Version {
		return h, nil, ErrVersion
	}
	n := int(binary.BigEndian.Uint16(b[6:]))
	if b[5] != kindFlows || n > MaxEntries || len(b) != HeaderLen+n*EntryLen+MACLen {
		return h, nil, ErrMalformed
	}
	end := HeaderLen + n*EntryLen
	c.mac.Reset()
	c.mac.Write(b[:end])
	if !hmac.Equal(c.mac.Sum(c.sum[:0]), b[end:]) {
		return h, nil, ErrAuth
	}
	h.Sender = binary.BigEndian.Uint64(b[8:])
	h.Seq = binary.BigEndian.Uint64(b[16:])
	h.Time = int64(binary.BigEndian.Uint64(b[24:]))
	return h, b[HeaderLen:end], nil
}

// entry reads the i-th flow of entries; false when it makes no sense
// (a protocol other than TCP and UDP, a zero port, an address that is
// not unicast, flags beyond the known ones).
func entry(entries []byte, i int) (plane.SyncedFlow, bool) {
	b := entries[i*EntryLen : (i+1)*EntryLen]
	var f plane.SyncedFlow
	proto := l4.Protocol(b[0])
	if (proto != l4.TCP && proto != l4.UDP) || b[1]&^(flagClosing|flagFlow4|flagBackend4|flagPin) != 0 || b[2] != 0 || b[3] != 0 || b[30] != 0 || b[31] != 0 {
		return f, false
	}
	client, ok1 := addrOf(b[8:24], b[1]&flagFlow4 != 0)
	vip, ok2 := addrOf(b[32:48], b[1]&flagFlow4 != 0)
	be, ok3 := addrOf(b[48:64], b[1]&flagBackend4 != 0)
	cp, vp, bp := binary.BigEndian.Uint16(b[24:]), binary.BigEndian.Uint16(b[26:]), binary.BigEndian.Uint16(b[28:])
	pin := b[1]&flagPin != 0
	if !ok1 || !ok2 || !ok3 || vp == 0 || bp == 0 || (cp == 0) != pin || (pin && (proto != l4.TCP || b[1]&flagClosing != 0)) {
		return f, false
	}
	f.Pin = pin
	f.Flow = l4.Flow{Src: netip.AddrPortFrom(client, cp), Dst: netip.AddrPortFrom(vip, vp), Proto: proto}
	f.Backend = netip.AddrPortFrom(be, bp)
	f.Age = time.Duration(binary.BigEndian.Uint32(b[4:])) * time.Millisecond
	f.Closing = b[1]&flagClosing != 0
	return f, true
}

// addrOf reads a 16-byte address, IPv4 as IPv4-mapped.
func addrOf(b []byte, v4 bool) (netip.Addr, bool) {
	a := netip.AddrFrom16([16]byte(b))
	if v4 {
		if !a.Is4In6() {
			return netip.Addr{}, false
		}
		a = a.Unmap()
	} else if a.Is4In6() {
		return netip.Addr{}, false
	}
	if a.IsUnspecified() || a.IsMulticast() {
		return netip.Addr{}, false
	}
	return a, true
}
