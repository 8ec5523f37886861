package pgstartup

import "errors"

// MaxStartup bounds the first packet, length word included: PostgreSQL
// refuses a longer one (MAX_STARTUP_PACKET_LENGTH).
const MaxStartup = 10000

// Request codes: the second word of the first packet. A StartupMessage
// carries the protocol version instead (major << 16 | minor).
const (
	codeCancel = 80877102 // 1234 << 16 | 5678
	codeSSL    = 80877103 // 1234 << 16 | 5679
	codeGSSENC = 80877104 // 1234 << 16 | 5680
	major3     = 3
	header     = 8 // length word and code
)

// Kind is what the first packet is.
type Kind uint8

const (
	// Startup: a protocol 3 StartupMessage; its parameters follow in
	// plain text.
	Startup Kind = iota + 1
	// SSL: an SSLRequest; TLS follows if the server agrees, and the
	// StartupMessage inside it is not readable here.
	SSL
	// GSSENC: a GSSENCRequest; GSSAPI encryption follows, likewise.
	GSSENC
	// Cancel: a CancelRequest (a backend's PID and secret key, no
	// database or user).
	Cancel
)

// Errors Parse returns once it knows the answer cannot change with more
// bytes.
var (
	ErrMalformed = errors.New("malformed PostgreSQL startup packet")
	ErrTooLarge  = errors.New("PostgreSQL startup packet too large")
)

// Message is what Parse read. Database and User point into the input
// (empty: not sent); as the server does, a StartupMessage without a
// database (or with an empty one) names the user's.
type Message struct {
	Kind           Kind
	Database, User []byte
}

// Parse reads the first packet at the start of data. more is true when
// data ends before the packet does (peek again once more bytes came);
// err says why it is not a packet PostgreSQL would take, and never will
// be.
func Parse(data []byte) (m Message, more bool, err error) {
	if len(data) < 4 {
		return m, true, nil
	}
	n := int(be32(data))
	switch {
	case n > MaxStartup:
		return m, false, ErrTooLarge
	case n < header:
		return m, false, ErrMalformed
	}
	if len(data) < header {
		return m, true, nil
	}
	code := be32(data[4:])
	want := header // the requests' own lengths
	switch code {
	case codeSSL:
		m.Kind = SSL
	case codeGSSENC:
		m.Kind = GSSENC
	case codeCancel:
		m.Kind, want = Cancel, 16
	default:
		if code>>16 != major3 {
			return m, false, ErrMalformed
		}
		m.Kind, want = Startup, n
	}
	if n != want {
		return Message{}, false, ErrMalformed
	}
	if len(data) < n {
		return Message{}, true, nil
	}
	if m.Kind == Startup {
		return params(data[header:n])
	}
	return m, false, nil
}

// params reads the key\0value\0 pairs of a StartupMessage, which end
// with an empty key (a lone \0) at the packet's last byte. A parameter
// given twice counts by its last value, as the server takes it.
func params(b []byte) (m Message, more bool, err error) {
	m.Kind = Startup
	for {
		key, rest, ok := cstring(b)
		if !ok {
			return Message{}, false, ErrMalformed
		}
		if len(key) == 0 {
			if len(rest) != 0 {
				return Message{}, false, ErrMalformed
			}
			break
		}
		val, rest, ok := cstring(rest)
		if !ok {
			return Message{}, false, ErrMalformed
		}
		switch string(key) {
		case "database":
			m.Database = val
		case "user":
			m.User = val
		}
		b = rest
	}
	if len(m.Database) == 0 {
		m.Database = m.User
	}
	return m, false, nil
}

// cstring splits a \0-terminated string off the front of b.
func cstring(b []byte) (s, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
