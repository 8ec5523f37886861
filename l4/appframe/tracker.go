// The tracker: one type for the three protocols, dispatching by protocol
// on each chunk.

package appframe

// Proto is the framing a Tracker follows.
type Proto uint8

// Protocols.
const (
	None      Proto = iota // nothing to follow: the tracker stays lost
	Postgres               // the PostgreSQL frontend/backend protocol (version 3)
	MySQL                  // the MySQL/MariaDB client/server protocol (4.1)
	WebSocket              // an HTTP/1.1 response head, then RFC 6455 frames
)

// headLen is how many bytes of a message's start the tracker keeps: a
// MySQL packet header and the head of its payload up to an OK packet's
// status flags (4 + 1 + 9 + 9 + 2), a WebSocket frame header (2 + 8 + 4).
const headLen = 28

// Tracker follows one server-to-client stream. The zero value is lost;
// Reset starts it on a protocol.
type Tracker struct {
	left   uint64 // bytes left of the current message's body
	need   uint32 // bytes the current header needs in head (0: no header under way)
	plen   uint32 // MySQL: the current packet's payload length
	idles  uint32 // idle messages seen (ReadyForQuery idle, OK/EOF idle)
	cols   uint32 // MySQL: column definitions left of a result set
	status uint16 // MySQL: the last status flags an OK or EOF said
	proto  Proto
	state  uint8
	hn     uint8 // bytes in head
	idle   bool  // the last whole message left the session idle
	was    bool  // PostgreSQL: idle before the current message began (asynchronous messages keep it)
	lost   bool
	tls    bool
	closed bool // WebSocket: the server sent a Close frame
	cont   bool // MySQL: the current packet continues one of 0xffffff bytes
	head   [headLen]byte
}

// Reset starts t over on protocol p, at the start of a connection's
// server stream.
func (t *Tracker) Reset(p Proto) {
	*t = Tracker{proto: p}
	switch p {
	case Postgres:
		t.state = pgPre
	case MySQL:
		t.state, t.need = myGreeting, 4
	case WebSocket:
		t.state = wsHead
	default:
		t.lost = true
	}
}

// Feed follows b, the next bytes of the server's stream.
func (t *Tracker) Feed(b []byte) {
	t.feed(b, false)
}

// FeedToBoundary follows b up to the first frame boundary (WebSocket:
// between two frames, after the response head): it returns how many
// bytes of b it followed and whether it stopped at a boundary (then the
// rest of b is not followed). At a boundary already, it stops at 0.
func (t *Tracker) FeedToBoundary(b []byte) (int, bool) {
	return t.feed(b, true)
}

func (t *Tracker) feed(b []byte, stop bool) (int, bool) {
	if t.lost {
		return len(b), false
	}
	switch t.proto {
	case Postgres:
		t.feedPG(b)
	case MySQL:
		t.feedMy(b)
	case WebSocket:
		return t.feedWS(b, stop)
	}
	return len(b), false
}

// Idle reports whether the stream stands at a boundary where the session
// is idle: the last whole message said so and nothing of the next one
// has come (PostgreSQL: ReadyForQuery 'I'; MySQL: an OK or EOF ending a
// response, no transaction open, no more results; WebSocket: between two
// frames).
func (t *Tracker) Idle() bool {
	if t.lost || t.left > 0 || t.hn > 0 {
		return false
	}
	if t.proto == WebSocket {
		return t.state == wsFrame
	}
	return t.idle
}

// Idles counts the idle messages seen (the first ends the startup or the
// authentication); WebSocket: 0.
func (t *Tracker) Idles() uint32 { return t.idles }

// Lost reports whether the tracker lost the framing (or the stream went
// TLS): it follows nothing more.
func (t *Tracker) Lost() bool { return t.lost }

// TLS reports whether the stream went TLS (the tracker is lost too).
func (t *Tracker) TLS() bool { return t.tls }

// ServerClosed reports whether the server sent a WebSocket Close frame.
func (t *Tracker) ServerClosed() bool { return t.closed }

// lose gives up on the stream.
func (t *Tracker) lose() { t.lost, t.idle = true, false }

// take moves up to what the current header needs from b into head; it
// returns how many bytes it took.
func (t *Tracker) take(b []byte) int {
	k := min(len(b), int(t.need)-int(t.hn))
	copy(t.head[t.hn:], b[:k])
	t.hn += uint8(k)
	return k
}

// skip passes over the current body's bytes in b; it returns how many.
func (t *Tracker) skip(b []byte) int {
	k := min(uint64(len(b)), t.left)
	t.left -= k
	return int(k)
}

// CloseFrame appends a WebSocket Close frame with code, as a server sends
// it (unmasked, no reason), to b.
func CloseFrame(b []byte, code uint16) []byte {
	return append(b, 0x88, 2, byte(code>>8), byte(code))
}

// CloseFrameLen is the length of CloseFrame's frame.
const CloseFrameLen = 4

// WebSocket close codes l4lb sends (RFC 6455 7.4.1, and the IANA
// registry for 1012).
const (
	CloseGoingAway      uint16 = 1001
	CloseServiceRestart uint16 = 1012
)
