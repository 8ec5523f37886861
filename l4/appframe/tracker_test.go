package appframe

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// pgMessage is a PostgreSQL server message.
func pgMessage(typ byte, body ...byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

// pgSession is a server's side of a startup after a refused SSLRequest,
// a transaction of three statements, and a simple query outside one.
func pgSession() (stream []byte, idleAt []int) {
	var s []byte
	add := func(b []byte, idle bool) {
		s = append(s, b...)
		if idle {
			idleAt = append(idleAt, len(s))
		}
	}
	add([]byte{'N'}, false) // SSLRequest refused
	add(pgMessage('R', 0, 0, 0, 0), false)
	add(pgMessage('S', []byte("server_version\x0017.0\x00")...), false)
	add(pgMessage('K', 1, 2, 3, 4, 5, 6, 7, 8), false)
	add(pgMessage('Z', 'I'), true) // the startup's end
	add(pgMessage('C', []byte("BEGIN\x00")...), false)
	add(pgMessage('Z', 'T'), false)
	add(pgMessage('T', make([]byte, 30)...), false)
	add(pgMessage('D', make([]byte, 70000)...), false) // a long row
	add(pgMessage('C', []byte("SELECT 1\x00")...), false)
	add(pgMessage('Z', 'T'), false)
	add(pgMessage('E', make([]byte, 20)...), false)
	add(pgMessage('Z', 'E'), false) // failed transaction
	add(pgMessage('C', []byte("ROLLBACK\x00")...), false)
	add(pgMessage('Z', 'I'), true)
	add(pgMessage('A', make([]byte, 12)...), true) // a notification while idle: still idle
	add(pgMessage('C', []byte("SELECT 0\x00")...), false)
	add(pgMessage('Z', 'I'), true)
	return s, idleAt
}

// myPacket is a MySQL packet.
func myPacket(seq byte, payload ...byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

func myOK(seq byte, status uint16) []byte {
	return myPacket(seq, 0x00, 0, 0, byte(status), byte(status>>8), 0, 0)
}

func myEOF(seq byte, status uint16) []byte {
	return myPacket(seq, 0xfe, 0, 0, byte(status), byte(status>>8))
}

// mySession: greeting, authentication, a result set with EOFs, a
// transaction, a result set under CLIENT_DEPRECATE_EOF, two results of
// a multi-statement, an ERR outside a transaction.
func mySession() (stream []byte, idleAt []int) {
	var s []byte
	add := func(b []byte, idle bool) {
		s = append(s, b...)
		if idle {
			idleAt = append(idleAt, len(s))
		}
	}
	add(myPacket(0, append([]byte{0x0a}, []byte("11.8.3-MariaDB\x00")...)...), false)
	add(myPacket(2, 0xfe, 'm', 'y', 's', 'q', 'l', 0), false) // an auth switch
	add(myOK(4, 0x0002), true)                                // authenticated: autocommit
	add(myPacket(1, 2), false)                                // two columns
	add(myPacket(2, make([]byte, 40)...), false)
	add(myPacket(3, make([]byte, 40)...), false)
	add(myEOF(4, 0x0002), false) // after the column definitions: not an end
	add(myPacket(5, 1, 'a', 1, 'b'), false)
	add(myEOF(6, 0x0002), true)
	add(myOK(1, 0x0003), false) // BEGIN: in a transaction
	add(myPacket(1, 1), false)  // one column (CLIENT_DEPRECATE_EOF: no EOF after it)
	add(myPacket(2, make([]byte, 30)...), false)
	add(myPacket(3, 1, 'x'), false)
	add(myPacket(4, 0xfe, 0, 0, 0x03, 0, 0, 0), false) // OK terminator, in the transaction
	add(myOK(1, 0x0002), true)                         // COMMIT
	add(myOK(1, 0x000a), false)                        // more results follow
	add(myPacket(2, 1), false)
	add(myPacket(3, make([]byte, 20)...), false)
	add(myEOF(4, 0x0002), false)
	add(myPacket(5, append([]byte{0xfc, 0x10, 0x27}, make([]byte, 10000)...)...), false) // a 10000-byte row
	add(myEOF(6, 0x0002), true)
	add(myPacket(1, 0xff, 0x28, 0x04, '#'), true) // an ERR: the session stays as it was (idle)
	return s, idleAt
}

// wsSession: a 101 answer and frames of every length form, a fragmented
// message with a ping between its fragments; a boundary after the head
// and after each frame.
func wsSession() (stream []byte, bounds []int) {
	s := []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
	bounds = append(bounds, len(s))
	frame := func(b0 byte, n int) {
		switch {
		case n < 126:
			s = append(s, b0, byte(n))
		case n < 1<<16:
			s = append(s, b0, 126, byte(n>>8), byte(n))
		default:
			s = append(s, b0, 127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		}
		s = append(s, make([]byte, n)...)
		bounds = append(bounds, len(s))
	}
	frame(0x81, 5)
	frame(0x82, 300)
	frame(0x82, 70000)
	frame(0x01, 10) // a text message's first fragment
	frame(0x89, 4)  // ping between the fragments
	frame(0x80, 10) // the last fragment
	frame(0x81, 0)
	return s, bounds
}

// idleByByte feeds s one byte at a time and returns every offset where
// the tracker says idle.
func idleByByte(p Proto, s []byte) []int {
	var t Tracker
	t.Reset(p)
	var at []int
	for i := range s {
		t.Feed(s[i : i+1])
		if t.Idle() {
			at = append(at, i+1)
		}
	}
	return at
}

func TestTrackersFindTheBoundaries(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Proto
		gen  func() ([]byte, []int)
	}{
		{"postgres", Postgres, pgSession},
		{"mysql", MySQL, mySession},
		{"websocket", WebSocket, wsSession},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, want := tc.gen()
			if got := idleByByte(tc.p, s); !slices.Equal(got, want) {
				t.Fatalf("idle at %v, want %v", got, want)
			}
			var tr Tracker
			tr.Reset(tc.p)
			tr.Feed(s)
			if !tr.Idle() || tr.Lost() {
				t.Fatalf("whole stream: idle %v lost %v", tr.Idle(), tr.Lost())
			}
		})
	}
}

// TestRandomChunksReachTheSameBoundaries: however the stream is cut into
// reads, the tracker says idle exactly at the boundaries.
func TestRandomChunksReachTheSameBoundaries(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		p   Proto
		gen func() ([]byte, []int)
	}{{Postgres, pgSession}, {MySQL, mySession}, {WebSocket, wsSession}} {
		s, bounds := tc.gen()
		for range 200 {
			checkChunks(t, tc.p, s, bounds, randomCuts(rng, len(s)))
		}
	}
}

func randomCuts(rng *rand.Rand, n int) []int {
	var cuts []int
	for at := 0; at < n; {
		at += 1 + rng.IntN(min(n-at, 1+rng.IntN(3)*9000))
		cuts = append(cuts, at)
	}
	return cuts
}

// checkChunks feeds s cut at cuts and checks Idle at each cut against
// bounds, and that FeedToBoundary (WebSocket) stops at each boundary.
func checkChunks(t *testing.T, p Proto, s []byte, bounds, cuts []int) {
	t.Helper()
	var tr Tracker
	tr.Reset(p)
	prev := 0
	for _, c := range cuts {
		tr.Feed(s[prev:c])
		if got, want := tr.Idle(), slices.Contains(bounds, c); got != want {
			t.Fatalf("%v: after %d bytes (cuts %v): idle %v, want %v", p, c, cuts, got, want)
		}
		prev = c
	}
	if p != WebSocket {
		return
	}
	tr.Reset(p)
	var stops []int
	prev = 0
	for _, c := range cuts {
		for at := prev; at < c; {
			n, ok := tr.FeedToBoundary(s[at:c])
			if ok && (len(stops) == 0 || stops[len(stops)-1] != at+n) {
				stops = append(stops, at+n)
			}
			if ok && n == 0 {
				tr.Feed(s[at : at+1]) // past the boundary
				n = 1
			}
			at += n
		}
		prev = c
	}
	if !slices.Equal(stops, bounds[:len(bounds)-1]) && !slices.Equal(stops, bounds) {
		t.Fatalf("FeedToBoundary stopped at %v, want %v", stops, bounds)
	}
}

func TestTrackersGiveUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Proto
		s    []byte
		tls  bool
	}{
		{"postgres ssl accepted", Postgres, []byte{'S', 0x16, 3, 3}, true},
		{"postgres gss accepted", Postgres, []byte{'G'}, true},
		{"postgres length too short", Postgres, []byte{'R', 0, 0, 0, 3}, false},
		{"postgres length too long", Postgres, []byte{'D', 0x7f, 0, 0, 0}, false},
		{"postgres readyforquery too long", Postgres, pgMessage('Z', 'I', 'I'), false},
		{"mysql not a greeting", MySQL, myPacket(0, 9, 1, 2), false},
		{"mysql tls", MySQL, append(myPacket(0, 0x0a, 0), 0x16, 0x03, 0x03, 0x00, 0x7a), true},
		{"mysql too many columns", MySQL, append(append(myPacket(0, 0x0a, 0), myOK(2, 2)...), myPacket(1, 0xfc, 0xff, 0xff)...), false},
		{"websocket not 101", WebSocket, []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), false},
		{"websocket reserved opcode", WebSocket, []byte("HTTP/1.1 101 x\r\n\r\n\x83\x00"), false},
		{"websocket long control frame", WebSocket, []byte("HTTP/1.1 101 x\r\n\r\n\x89\x7e\x00\x80"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr Tracker
			tr.Reset(tc.p)
			tr.Feed(tc.s)
			if !tr.Lost() || tr.TLS() != tc.tls || tr.Idle() {
				t.Fatalf("lost %v tls %v idle %v, want lost, tls %v, not idle", tr.Lost(), tr.TLS(), tr.Idle(), tc.tls)
			}
		})
	}
}

func TestWebSocketServerClose(t *testing.T) {
	var tr Tracker
	tr.Reset(WebSocket)
	tr.Feed([]byte("HTTP/1.1 101 x\r\n\r\n"))
	tr.Feed(CloseFrame(nil, CloseGoingAway))
	if !tr.ServerClosed() || !tr.Idle() {
		t.Fatalf("closed %v idle %v", tr.ServerClosed(), tr.Idle())
	}
}

// FuzzTrackers: any bytes, cut anywhere, never panic, and the tracker
// says idle at a cut exactly when byte-by-byte feeding says so there.
func FuzzTrackers(f *testing.F) {
	for _, g := range []func() ([]byte, []int){pgSession, mySession, wsSession} {
		s, _ := g()
		f.Add(uint8(0), uint64(7), s[:min(len(s), 2000)])
	}
	f.Add(uint8(1), uint64(3), []byte{0x4a, 0, 0, 0, 0x0a, 0xfe})
	f.Fuzz(func(t *testing.T, proto uint8, seed uint64, s []byte) {
		p := Proto(1 + proto%3)
		idle := idleByByte(p, s)
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		var tr Tracker
		tr.Reset(p)
		prev := 0
		for _, c := range randomCuts(rng, len(s)) {
			if p == WebSocket && rng.IntN(2) == 0 {
				n, ok := tr.FeedToBoundary(s[prev:c])
				if ok && !tr.Idle() {
					t.Fatalf("stopped at %d, not a boundary", prev+n)
				}
				if n > c-prev {
					t.Fatalf("followed %d of %d bytes", n, c-prev)
				}
				tr.Feed(s[prev+n : c])
			} else {
				tr.Feed(s[prev:c])
			}
			if got, want := tr.Idle(), slices.Contains(idle, c); got != want {
				t.Fatalf("after %d bytes: idle %v, byte by byte %v", c, got, want)
			}
			prev = c
		}
	})
}
