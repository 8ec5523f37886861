// The BFD Control packet (RFC 5880 section 4.1): its fields and the codec,
// with the checks of section 6.8.6 that need no session.

package bfd

import (
	"encoding/binary"
	"errors"
)

// Wire constants.
const (
	Version   = 1    // the protocol version this package speaks
	PacketLen = 24   // a Control packet without authentication
	Port      = 3784 // RFC 5881: the destination port of single-hop Control packets
	// Source ports of the sending sockets (RFC 5881 section 4).
	SourcePortMin = 49152
	SourcePortMax = 65535
	// TTL every single-hop packet is sent with and must arrive with.
	TTL = 255
)

// State is a session state (RFC 5880 section 4.1, Sta).
type State uint8

// The states, with their wire values.
const (
	StateAdminDown State = 0
	StateDown      State = 1
	StateInit      State = 2
	StateUp        State = 3
)

func (s State) String() string {
	switch s {
	case StateAdminDown:
		return "admindown"
	case StateDown:
		return "down"
	case StateInit:
		return "init"
	case StateUp:
		return "up"
	}
	return "invalid"
}

// Diag is why a session last left Up (RFC 5880 section 4.1, Diag).
type Diag uint8

// The diagnostics this package sets or names.
const (
	DiagNone             Diag = 0
	DiagTimeExpired      Diag = 1 // Control Detection Time Expired
	DiagEchoFailed       Diag = 2
	DiagNeighborDown     Diag = 3 // Neighbor Signaled Session Down
	DiagForwardingReset  Diag = 4
	DiagPathDown         Diag = 5
	DiagConcatPathDown   Diag = 6
	DiagAdminDown        Diag = 7 // Administratively Down
	DiagRevConcatPathDwn Diag = 8
)

func (d Diag) String() string {
	switch d {
	case DiagNone:
		return "none"
	case DiagTimeExpired:
		return "detection-time-expired"
	case DiagEchoFailed:
		return "echo-failed"
	case DiagNeighborDown:
		return "neighbor-down"
	case DiagForwardingReset:
		return "forwarding-reset"
	case DiagPathDown:
		return "path-down"
	case DiagConcatPathDown:
		return "concatenated-path-down"
	case DiagAdminDown:
		return "admin-down"
	case DiagRevConcatPathDwn:
		return "reverse-concatenated-path-down"
	}
	return "reserved"
}

// Packet is a Control packet's fields; intervals in microseconds, as on
// the wire.
type Packet struct {
	Diag       Diag
	State      State
	Poll       bool
	Final      bool
	CPI        bool // Control Plane Independent
	Auth       bool // an authentication section follows
	Demand     bool
	Multipoint bool
	DetectMult uint8
	// Length is the packet's length field (Decode fills it; Encode always
	// writes PacketLen).
	Length            uint8
	MyDiscr           uint32
	YourDiscr         uint32
	DesiredMinTx      uint32
	RequiredMinRx     uint32
	RequiredMinEchoRx uint32
}

// Why Decode refused a packet (RFC 5880 section 6.8.6, the checks that
// need no session). Each is a sentinel: callers count them by kind.
var (
	ErrShort      = errors.New("bfd: packet shorter than its header")
	ErrVersion    = errors.New("bfd: version is not 1")
	ErrLength     = errors.New("bfd: length field below the minimum or beyond the datagram")
	ErrDetectMult = errors.New("bfd: detect multiplier 0")
	ErrMultipoint = errors.New("bfd: multipoint bit set")
	ErrMyDiscr    = errors.New("bfd: my discriminator 0")
	ErrYourDiscr  = errors.New("bfd: your discriminator 0 in a state other than down or admindown")
)

// Encode writes p into b, with the length field PacketLen and the A bit
// clear (this package sends no authentication).
func (p *Packet) Encode(b *[PacketLen]byte) {
	b[0] = Version<<5 | byte(p.Diag)&0x1f
	f := byte(p.State) << 6
	for i, bit := range [...]bool{p.Poll, p.Final, p.CPI, false, p.Demand, p.Multipoint} {
		if bit {
			f |= 1 << (5 - i)
		}
	}
	b[1] = f
	b[2] = p.DetectMult
	b[3] = PacketLen
	binary.BigEndian.PutUint32(b[4:], p.MyDiscr)
	binary.BigEndian.PutUint32(b[8:], p.YourDiscr)
	binary.BigEndian.PutUint32(b[12:], p.DesiredMinTx)
	binary.BigEndian.PutUint32(b[16:], p.RequiredMinRx)
	binary.BigEndian.PutUint32(b[20:], p.RequiredMinEchoRx)
}

// Decode reads a Control packet from one datagram and applies the checks
// of RFC 5880 section 6.8.6 that need no session: version 1, a length
// field of at least 24 (26 with the A bit) and no more than the datagram,
// a detect multiplier, no multipoint bit, a my discriminator, and a your
// discriminator unless the state is Down or AdminDown. Bytes past the
// length field are ignored. It does not allocate.
func Decode(b []byte) (Packet, error) {
	var p Packet
	if len(b) < PacketLen {
		return p, ErrShort
	}
	if b[0]>>5 != Version {
		return p, ErrVersion
	}
	p.Diag = Diag(b[0] & 0x1f)
	p.State = State(b[1] >> 6)
	p.Poll = b[1]&0x20 != 0
	p.Final = b[1]&0x10 != 0
	p.CPI = b[1]&0x08 != 0
	p.Auth = b[1]&0x04 != 0
	p.Demand = b[1]&0x02 != 0
	p.Multipoint = b[1]&0x01 != 0
	p.DetectMult = b[2]
	p.Length = b[3]
	minLen := PacketLen
	if p.Auth {
		minLen = PacketLen + 2
	}
	if int(p.Length) < minLen || int(p.Length) > len(b) {
		return p, ErrLength
	}
	if p.DetectMult == 0 {
		return p, ErrDetectMult
	}
	if p.Multipoint {
		return p, ErrMultipoint
	}
	p.MyDiscr = binary.BigEndian.Uint32(b[4:])
	p.YourDiscr = binary.BigEndian.Uint32(b[8:])
	p.DesiredMinTx = binary.BigEndian.Uint32(b[12:])
	p.RequiredMinRx = binary.BigEndian.Uint32(b[16:])
	p.RequiredMinEchoRx = binary.BigEndian.Uint32(b[20:])
	if p.MyDiscr == 0 {
		return p, ErrMyDiscr
	}
	if p.YourDiscr == 0 && p.State != StateDown && p.State != StateAdminDown {
		return p, ErrYourDiscr
	}
	return p, nil
}
