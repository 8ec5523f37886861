// MySQL/MariaDB: packets of a 3-byte little-endian payload length and a
// sequence id. A response is an OK, an ERR, or a result set (a column
// count, that many column definitions, an EOF unless CLIENT_DEPRECATE_EOF,
// rows, and an EOF or an OK with header 0xfe).

package appframe

import "encoding/binary"

// MySQL tracker states: what the next packet is.
const (
	myGreeting uint8 = iota // the server's handshake
	myAuthTLS               // the first packet after it: a TLS record if the client asked for TLS
	myAuth                  // authentication exchange: an OK ends it
	myResp                  // the start of a response (or nothing: idle)
	myCols                  // column definitions
	myColEnd                // after the last column definition: its EOF, or a row (CLIENT_DEPRECATE_EOF)
	myRows                  // rows, up to an EOF or OK (0xfe) or an ERR
)

// MySQL status flags.
const (
	myInTrans     = 0x0001 // SERVER_STATUS_IN_TRANS
	myMoreResults = 0x0008 // SERVER_MORE_RESULTS_EXISTS
)

const (
	myMaxPacket = 0xffffff // a payload this long continues in the next packet
	myMaxCols   = 4096     // the most columns a result set has
)

func (t *Tracker) feedMy(b []byte) {
	for len(b) > 0 && !t.lost {
		switch {
		case t.need > 0:
			b = b[t.myTake(b):]
		default:
			b = b[t.skip(b):]
			if t.left == 0 {
				t.myEnd()
			}
		}
	}
}

// myTake takes the packet header and the head of its payload from b; it
// returns how many bytes.
func (t *Tracker) myTake(b []byte) int {
	if t.hn == 0 {
		t.idle = false
	}
	k := t.take(b)
	if t.hn < uint8(t.need) {
		return k
	}
	if t.hn == 4 { // the header: now the payload's head
		t.plen = uint32(t.head[0]) | uint32(t.head[1])<<8 | uint32(t.head[2])<<16
		if t.state == myAuthTLS && t.head[0] == 0x16 && t.head[1] == 0x03 && t.head[2] <= 4 {
			t.tls = true // a TLS record (handshake, version 3.x) where a packet was due
			t.lose()
			return k
		}
		t.need = 4 + min(t.plen, headLen-4)
		if t.need > 4 {
			return k + t.myTake(b[k:])
		}
	}
	t.left = uint64(t.plen) - uint64(t.need-4)
	t.need = 0
	if t.left == 0 {
		t.myEnd()
	}
	return k
}

// myEnd: the current packet ended; its header and head are in head.
func (t *Tracker) myEnd() {
	cont := t.cont
	t.cont = t.plen == myMaxPacket
	t.hn, t.need = 0, 4
	if cont {
		return // the rest of a long packet: its start was read
	}
	p := t.head[4:min(4+t.plen, headLen)]
	first := byte(0)
	if len(p) > 0 {
		first = p[0]
	}
	switch t.state {
	case myGreeting:
		t.state = myAuthTLS
		if first != 0x0a && first != 0xff {
			t.lose() // not protocol 10, not an error
		}
	case myAuthTLS, myAuth:
		t.state = myAuth
		if first == 0x00 {
			t.myDone(okStatus(p))
		}
	case myResp:
		t.myResponse(p, first)
	case myCols:
		if t.cols--; t.cols == 0 {
			t.state = myColEnd
		}
	case myColEnd:
		if first == 0xfe && t.plen == 5 {
			t.state = myRows // the EOF after the column definitions
			return
		}
		t.state = myRows
		t.myRow(p, first)
	case myRows:
		t.myRow(p, first)
	}
}

// myResponse reads the first packet of a response.
func (t *Tracker) myResponse(p []byte, first byte) {
	switch {
	case first == 0x00:
		t.myDone(okStatus(p))
	case first == 0xff:
		t.myDone(t.status &^ myMoreResults) // an ERR ends it: the transaction state is as it was
	case first == 0xfe && t.plen < 9:
		t.myDone(eofStatus(p))
	case first == 0xfb:
		// LOCAL INFILE: the client sends a file, then the server's OK.
	default:
		n, ok := lenenc(p)
		if !ok || n == 0 || n > myMaxCols {
			t.lose()
			return
		}
		t.state, t.cols = myCols, uint32(n)
	}
}

// myRow reads a packet among the rows: a row, or what ends them.
func (t *Tracker) myRow(p []byte, first byte) {
	switch {
	case first == 0xfe && t.plen < myMaxPacket:
		// A row starting 0xfe is at least 2^24 bytes long: this ends them.
		if t.plen == 5 {
			t.myDone(eofStatus(p))
		} else {
			t.myDone(okStatus(p))
		}
	case first == 0xff:
		t.myDone(t.status &^ myMoreResults)
	}
}

// myDone: a response ended with these status flags.
func (t *Tracker) myDone(status uint16) {
	t.status = status
	t.state = myResp
	t.idle = status&(myInTrans|myMoreResults) == 0
	if t.idle {
		t.idles++
	}
}

// okStatus reads an OK packet's status flags (p: its head): after the
// header byte, the affected rows and the last insert id.
func okStatus(p []byte) uint16 {
	if len(p) == 0 {
		return myInTrans // an empty packet: not an OK
	}
	at := 1
	for range 2 {
		n := lenencLen(p[at:])
		if n == 0 {
			return myInTrans // cannot tell: not idle
		}
		at += n
	}
	if at+2 > len(p) {
		return myInTrans
	}
	return binary.LittleEndian.Uint16(p[at:])
}

// eofStatus reads an EOF packet's status flags (after the warnings).
func eofStatus(p []byte) uint16 {
	if len(p) < 5 {
		return myInTrans
	}
	return binary.LittleEndian.Uint16(p[3:5])
}

// lenencLen is the length of the length-encoded integer p starts with, 0
// if p is too short or it is not one.
func lenencLen(p []byte) int {
	if len(p) == 0 {
		return 0
	}
	n := 1
	switch p[0] {
	case 0xfc:
		n = 3
	case 0xfd:
		n = 4
	case 0xfe:
		n = 9
	case 0xfb, 0xff:
		return 0
	}
	if n > len(p) {
		return 0
	}
	return n
}

// lenenc reads the length-encoded integer p starts with.
func lenenc(p []byte) (uint64, bool) {
	n := lenencLen(p)
	switch n {
	case 0:
		return 0, false
	case 1:
		return uint64(p[0]), true
	}
	var v uint64
	for i := n - 1; i >= 1; i-- {
		v = v<<8 | uint64(p[i])
	}
	return v, true
}
