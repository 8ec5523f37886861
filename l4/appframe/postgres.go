// PostgreSQL: type byte and int32 length (itself included) per message;
// before the startup, one-byte answers to SSLRequest and GSSENCRequest.

package appframe

import "encoding/binary"

// PostgreSQL tracker states.
const (
	pgPre    uint8 = iota // before the first message: 'N' refuses an encryption request, 'S' or 'G' accepts it
	pgMsg                 // messages
	pgStatus              // ReadyForQuery's status byte is next
)

// pgMaxLen bounds a message's length: the server allocates at most 1 GB
// for one.
const pgMaxLen = 1 << 30

func (t *Tracker) feedPG(b []byte) {
	for len(b) > 0 && !t.lost {
		switch {
		case t.left > 0:
			b = b[t.skip(b):]
			if t.left == 0 {
				t.pgEnd(0)
			}
		case t.state == pgStatus:
			t.pgEnd(b[0])
			b = b[1:]
		case t.state == pgPre && t.hn == 0 && b[0] == 'N':
			b = b[1:] // encryption refused: the startup (or another request) follows
		case t.state == pgPre && t.hn == 0 && (b[0] == 'S' || b[0] == 'G'):
			t.tls = true // TLS or GSSAPI encryption: nothing more to read
			t.lose()
		default:
			b = b[t.pgHeader(b):]
		}
	}
}

// pgHeader takes a message header's bytes from b; it returns how many.
func (t *Tracker) pgHeader(b []byte) int {
	if t.hn == 0 {
		t.was, t.idle, t.need = t.idle, false, 5
	}
	k := t.take(b)
	if t.hn < 5 {
		return k
	}
	t.hn, t.need = 0, 0
	n := binary.BigEndian.Uint32(t.head[1:5])
	typ := t.head[0]
	switch {
	case n < 4 || n > pgMaxLen, typ == 'Z' && n != 5:
		t.lose()
	case typ == 'Z':
		t.state = pgStatus
	default:
		t.state, t.left = pgMsg, uint64(n-4)
		if t.left == 0 {
			t.pgEnd(0)
		}
	}
	return k
}

// pgEnd: the current message ended (status: ReadyForQuery's).
func (t *Tracker) pgEnd(status byte) {
	typ := t.head[0]
	t.state = pgMsg
	switch typ {
	case 'Z':
		t.idle = status == 'I'
		if t.idle {
			t.idles++
		}
	case 'A', 'N', 'S':
		// NotificationResponse, NoticeResponse, ParameterStatus: the
		// server may send them at any time; an idle session stays idle.
		t.idle = t.was && t.idles > 0
	default:
		t.idle = false
	}
}
