package sni

import "errors"

// MaxHello bounds a ClientHello handshake message (its body, without the
// record headers). Real ones are 200 bytes to 2 KiB (a post-quantum key
// share); 16 KiB is one full TLS record.
const MaxHello = 16 << 10

// MaxPeek is how many bytes a caller needs to peek at most: a ClientHello
// of MaxHello split into the smallest records still fits (each record
// adds a 5-byte header; records of fewer than 64 bytes are refused).
const MaxPeek = MaxHello + 4 + (MaxHello+4+minRecord-1)/minRecord*recordHeader

const (
	recordHeader    = 5
	recordHandshake = 0x16
	handshakeHello  = 1
	// minRecord: a ClientHello cut into records smaller than this (but
	// for the last) is refused: it would make MaxPeek large for nothing.
	minRecord     = 64
	extServerName = 0
	nameHost      = 0
)

// Errors Parse returns once it knows the answer cannot change with more
// bytes.
var (
	ErrNotTLS    = errors.New("not a TLS handshake")
	ErrMalformed = errors.New("malformed TLS ClientHello")
	ErrTooLarge  = errors.New("TLS ClientHello too large")
	ErrNoName    = errors.New("TLS ClientHello without a server name")
)

// Parse reads the first server name of the TLS ClientHello at the start
// of data. more is true when data ends before the ClientHello does (peek
// again once more bytes came); err says why there is no name and never
// will be. A ClientHello that spans several records is gathered into
// scratch, which needs MaxHello+4 bytes (a shorter one fails such hellos
// with ErrTooLarge); the name may point into it.
func Parse(data, scratch []byte) (name []byte, more bool, err error) {
	hs, more, err := handshake(data, scratch)
	if more || err != nil {
		return nil, more, err
	}
	name, err = serverName(hs)
	return name, false, err
}

// handshake returns the ClientHello handshake message (header included)
// from the records at the start of data.
func handshake(data, scratch []byte) (hs []byte, more bool, err error) {
	if len(data) > 0 && data[0] != recordHandshake {
		return nil, false, ErrNotTLS
	}
	if len(data) > 1 && data[1] != 3 {
		return nil, false, ErrNotTLS
	}
	if err := early(data); err != nil {
		return nil, false, err
	}
	body, rest, more, err := record(data)
	if more || err != nil {
		return nil, more, err
	}
	if len(body) < 4 {
		// Even the handshake header is split: gather like a long hello.
		return gather(body, rest, scratch)
	}
	if body[0] != handshakeHello {
		return nil, false, ErrNotTLS
	}
	n := int(body[1])<<16 | int(body[2])<<8 | int(body[3])
	if n > MaxHello {
		return nil, false, ErrTooLarge
	}
	if len(body) >= 4+n {
		return body[:4+n], false, nil
	}
	return gather(body, rest, scratch)
}

// early refuses, before its first record is complete, a hello that is
// not one or claims more than MaxHello: a client cannot make the proxy
// wait for bytes it would refuse anyway.
func early(data []byte) error {
	if len(data) < recordHeader+4 || int(data[3])<<8|int(data[4]) < 4 {
		return nil
	}
	hs := data[recordHeader:]
	if hs[0] != handshakeHello {
		return ErrNotTLS
	}
	if int(hs[1])<<16|int(hs[2])<<8|int(hs[3]) > MaxHello {
		return ErrTooLarge
	}
	return nil
}

// record splits the TLS record at the start of data into its body and
// what follows.
func record(data []byte) (body, rest []byte, more bool, err error) {
	if len(data) < recordHeader {
		return nil, nil, true, nil
	}
	if data[0] != recordHandshake || data[1] != 3 {
		return nil, nil, false, ErrMalformed
	}
	n := int(data[3])<<8 | int(data[4])
	if n == 0 || n > 1<<14 {
		return nil, nil, false, ErrMalformed
	}
	if len(data) < recordHeader+n {
		return nil, nil, true, nil
	}
	return data[recordHeader : recordHeader+n], data[recordHeader+n:], false, nil
}

// gather copies a handshake message split over records into scratch.
func gather(first, rest, scratch []byte) (hs []byte, more bool, err error) {
	got := copy(scratch, first)
	if got < len(first) {
		return nil, false, ErrTooLarge
	}
	want := -1 // total message length, once its header is in
	for {
		if want < 0 && got >= 4 {
			if scratch[0] != handshakeHello {
				return nil, false, ErrNotTLS
			}
			n := int(scratch[1])<<16 | int(scratch[2])<<8 | int(scratch[3])
			if n > MaxHello {
				return nil, false, ErrTooLarge
			}
			want = 4 + n
		}
		if want >= 0 && got >= want {
			return scratch[:want], false, nil
		}
		body, next, more, err := record(rest)
		if more || err != nil {
			return nil, more, err
		}
		if len(body) < minRecord && (want < 0 || got+len(body) < want) {
			return nil, false, ErrMalformed // tiny records: not a real client
		}
		if got+len(body) > len(scratch) {
			return nil, false, ErrTooLarge
		}
		got += copy(scratch[got:], body)
		rest = next
	}
}

// serverName walks a complete ClientHello message to its server_name
// extension.
func serverName(hs []byte) ([]byte, error) {
	p := reader(hs[4:])
	p.skip(2 + 32)  // client_version, random
	p.skip(p.u8())  // session_id
	p.skip(p.u16()) // cipher_suites
	p.skip(p.u8())  // compression_methods
	if p.bad {
		return nil, ErrMalformed
	}
	if len(p.b) == 0 {
		return nil, ErrNoName // no extensions at all
	}
	exts := reader(p.bytes(p.u16()))
	if p.bad {
		return nil, ErrMalformed
	}
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.bytes(exts.u16())
		if exts.bad {
			return nil, ErrMalformed
		}
		if typ == extServerName {
			return hostName(data)
		}
	}
	return nil, ErrNoName
}

// hostName returns the host_name entry of a server_name extension.
func hostName(ext []byte) ([]byte, error) {
	p := reader(ext)
	list := reader(p.bytes(p.u16()))
	if p.bad || len(p.b) != 0 {
		return nil, ErrMalformed
	}
	for len(list.b) > 0 {
		typ := list.u8()
		name := list.bytes(list.u16())
		if list.bad {
			return nil, ErrMalformed
		}
		if typ == nameHost {
			if !validName(name) {
				return nil, ErrMalformed
			}
			return name, nil
		}
	}
	return nil, ErrNoName
}

// validName accepts what a DNS host name may hold (RFC 6066: no trailing
// dot is sent, but one is tolerated), at most 255 bytes.
func validName(b []byte) bool {
	if len(b) == 0 || len(b) > 255 {
		return false
	}
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
		default:
			return false
		}
	}
	return true
}

// cursor reads big-endian fields; a read past the end sets bad and
// yields zeros, so that a walk checks once at its end.
type cursor struct {
	b   []byte
	bad bool
}

func reader(b []byte) cursor { return cursor{b: b} }

func (p *cursor) u8() int {
	if len(p.b) < 1 {
		p.bad = true
		return 0
	}
	v := int(p.b[0])
	p.b = p.b[1:]
	return v
}

func (p *cursor) u16() int {
	if len(p.b) < 2 {
		p.bad = true
		return 0
	}
	v := int(p.b[0])<<8 | int(p.b[1])
	p.b = p.b[2:]
	return v
}

func (p *cursor) bytes(n int) []byte {
	if len(p.b) < n || p.bad {
		p.bad = true
		p.b = nil
		return nil
	}
	v := p.b[:n]
	p.b = p.b[n:]
	return v
}

func (p *cursor) skip(n int) { p.bytes(n) }
