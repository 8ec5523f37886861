// WebSocket: the HTTP response head up to CRLFCRLF (101 or nothing to
// follow), then frames: two bytes, a 2- or 8-byte extended length, a
// mask key if masked (servers do not mask), the payload.

package appframe

import "encoding/binary"

// WebSocket tracker states.
const (
	wsHead  uint8 = iota // the HTTP response head
	wsFrame              // frames
)

// wsMaxHead bounds the response head.
const wsMaxHead = 16 << 10

// wsStatus is how the head must begin.
const wsStatus = "HTTP/1.1 101"

func (t *Tracker) feedWS(b []byte, stop bool) (int, bool) {
	at := 0
	for at < len(b) && !t.lost {
		if t.state == wsHead {
			at += t.wsHead(b[at:])
			continue
		}
		if stop && t.hn == 0 && t.left == 0 {
			return at, true
		}
		if t.left > 0 {
			at += t.skip(b[at:])
			continue
		}
		at += t.wsHeader(b[at:])
	}
	if stop && !t.lost && t.state == wsFrame && t.hn == 0 && t.left == 0 {
		return at, true
	}
	return len(b), false
}

// wsHead scans the response head: the status line's start is checked in
// head, then plen counts the bytes seen and cols the CRLFCRLF matched so
// far. It returns how many bytes of b it took.
func (t *Tracker) wsHead(b []byte) int {
	for i, c := range b {
		if int(t.hn) < len(wsStatus) {
			if c != wsStatus[t.hn] {
				t.lose() // not switching protocols: nothing to follow
				return len(b)
			}
			t.hn++
		}
		t.plen++
		if t.plen > wsMaxHead {
			t.lose()
			return len(b)
		}
		want := byte('\r')
		if t.cols%2 == 1 {
			want = '\n'
		}
		switch {
		case c == want:
			t.cols++
		case c == '\r':
			t.cols = 1
		default:
			t.cols = 0
		}
		if t.cols == 4 {
			t.state, t.hn, t.plen, t.cols = wsFrame, 0, 0, 0
			return i + 1
		}
	}
	return len(b)
}

// wsHeader takes a frame header's bytes from b; it returns how many.
func (t *Tracker) wsHeader(b []byte) int {
	if t.hn == 0 {
		t.need = 2
	}
	k := t.take(b)
	if t.hn < 2 {
		return k
	}
	if t.need == 2 { // the first two bytes say how long the header is
		switch t.head[1] & 0x7f {
		case 126:
			t.need += 2
		case 127:
			t.need += 8
		}
		if t.head[1]&0x80 != 0 {
			t.need += 4 // masked (a server must not; followed all the same)
		}
		if t.need > 2 {
			return k + t.wsHeader(b[k:])
		}
	}
	if t.hn < uint8(t.need) {
		return k
	}
	n := uint64(t.head[1] & 0x7f)
	switch n {
	case 126:
		n = uint64(binary.BigEndian.Uint16(t.head[2:4]))
	case 127:
		n = binary.BigEndian.Uint64(t.head[2:10])
	}
	op := t.head[0] & 0x0f
	switch {
	case n>>63 != 0, op >= 8 && (n > 125 || t.head[0]&0x80 == 0), op > 2 && op < 8, op > 10:
		t.lose() // a length or an opcode RFC 6455 does not allow
	case op == 8:
		t.closed = true
	}
	t.hn, t.need, t.left = 0, 0, n
	return k
}
