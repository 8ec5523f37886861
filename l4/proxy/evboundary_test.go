// Closing at a boundary of the app_protocol: a scripted server on a real
// socket says what the tracker follows; the client sees where it ends.

package proxy

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// scripted is a server connection that writes what the test says and
// reads what the client sends (each read reported), until EOF.
type scripted struct {
	say  chan []byte
	got  chan []byte
	done chan error // how its reading ended: nil = an orderly EOF
}

// scriptedServer's handler hands each connection's script to the test.
func scriptedServer() (chan *scripted, func(*net.TCPConn)) {
	conns := make(chan *scripted, 4)
	return conns, func(c *net.TCPConn) {
		s := &scripted{say: make(chan []byte, 8), got: make(chan []byte, 64), done: make(chan error, 1)}
		conns <- s
		go func() {
			for b := range s.say {
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				s.got <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				s.done <- err
				return
			}
		}
	}
}

// request sends b to the server through the proxy and waits until it
// arrived (what came before a server's answer must be known to l4lb).
func (s *scripted) request(t *testing.T, c *net.TCPConn, b string) {
	t.Helper()
	if _, err := c.Write([]byte(b)); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < len(b) {
		got = append(got, within(t, s.got, "the request at the server")...)
	}
}

// pgMsg is a PostgreSQL server message.
func pgMsg(typ byte, body ...byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// stillOpen fails unless c stays open (no byte, no EOF) for a while.
func stillOpen(t *testing.T, c *net.TCPConn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	n, err := c.Read(make([]byte, 64))
	if ne, ok := err.(net.Error); n > 0 || !ok || !ne.Timeout() {
		t.Fatalf("%s: read %d bytes, %v; want the connection open and quiet", what, n, err)
	}
}

// TestCloseWaitsForReadyForQueryIdle: a rebalance's close of a postgres
// connection in a transaction waits for the ReadyForQuery 'I' that ends
// it; the client gets the whole answer, then an orderly EOF, and the
// server an orderly EOF after the request it answered.
func TestCloseWaitsForReadyForQueryIdle(t *testing.T) {
	conns, h := scriptedServer()
	ts := newService(t, Settings{AppProtocol: l4.AppPostgres}, startServer(t, h))
	c := ts.dial(t)
	srv := within(t, conns, "the server's connection")
	startup := cat(pgMsg('R', 0, 0, 0, 0), pgMsg('Z', 'I'))
	srv.say <- startup
	readN(t, c, len(startup))
	srv.request(t, c, "BEGIN; UPDATE")
	inTx := cat(pgMsg('C', []byte("UPDATE 1\x00")...), pgMsg('Z', 'T'))
	srv.say <- inTx
	readN(t, c, len(inTx))

	if n := ts.CloseSome(ts.backends[0], 1, CloseFIN); n != 1 {
		t.Fatalf("CloseSome began %d closes, want 1", n)
	}
	if live := ts.backends[0].LiveFlows(); live != 0 {
		t.Fatalf("live flows %d once the close was asked, want 0", live)
	}
	stillOpen(t, c, "in a transaction")
	srv.request(t, c, "COMMIT")
	commit := cat(pgMsg('C', []byte("COMMIT\x00")...), pgMsg('Z', 'I'))
	srv.say <- commit
	if got := readEOF(t, c); string(got) != string(commit) {
		t.Fatalf("client got %q before EOF, want the COMMIT's answer %q", got, commit)
	}
	if err := within(t, srv.done, "the server's EOF"); err != nil {
		t.Fatalf("server: %v, want an orderly EOF", err)
	}
	testutil.Eventually(t, 5*time.Second, "the connection to end", func() bool { return ts.Conns() == 0 })
	if b, f := ts.Stats.BoundaryCloses.Load(), ts.Stats.BoundaryFallbacks.Load(); b != 1 || f != 0 {
		t.Fatalf("boundary closes %d, fallbacks %d; want 1, 0", b, f)
	}
}

// TestCloseWaitsForTheStartupToBeUsed: right after the startup the client
// is about to send its first query: a close waits for it to be answered
// (or for the session to stay quiet for quietFor).
func TestCloseWaitsForTheStartupToBeUsed(t *testing.T) {
	conns, h := scriptedServer()
	ts := newService(t, Settings{AppProtocol: l4.AppPostgres}, startServer(t, h))
	c := ts.dial(t)
	srv := within(t, conns, "the server's connection")
	startup := cat(pgMsg('R', 0, 0, 0, 0), pgMsg('S', []byte("a\x00b\x00")...), pgMsg('Z', 'I'))
	srv.say <- startup
	readN(t, c, len(startup))
	ts.CloseSome(ts.backends[0], 1, CloseFIN)
	srv.request(t, c, "SELECT 1") // at once: within quietFor
	answer := cat(pgMsg('D', 0, 1), pgMsg('C', []byte("SELECT 1\x00")...), pgMsg('Z', 'I'))
	srv.say <- answer
	if got := readEOF(t, c); string(got) != string(answer) {
		t.Fatalf("client got %q before EOF, want the answer %q", got, answer)
	}
	if b := ts.Stats.BoundaryCloses.Load(); b != 1 {
		t.Fatalf("boundary closes %d, want 1", b)
	}

	// A session that stays quiet after its startup closes after quietFor.
	c2 := ts.dial(t)
	srv = within(t, conns, "the server's second connection")
	srv.say <- startup
	readN(t, c2, len(startup))
	start := time.Now()
	ts.CloseSome(ts.backends[0], 1, CloseFIN)
	readEOF(t, c2)
	if waited := time.Since(start); waited < quietFor/2 {
		t.Fatalf("closed %v after the ask, before the session was quiet", waited)
	}
}

const wsHead = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"

// TestWebSocketGoodbyeAtFrameBoundary: a drain asked in the middle of a
// frame lets the frame finish, then tells the client goodbye (1001) and
// forwards nothing more of the server's; the client's answer reaches the
// server, and both sides get a FIN.
func TestWebSocketGoodbyeAtFrameBoundary(t *testing.T) {
	conns, h := scriptedServer()
	ts := newService(t, Settings{AppProtocol: l4.AppWebSocket}, startServer(t, h))
	c := ts.dial(t)
	srv := within(t, conns, "the server's connection")
	srv.say <- []byte(wsHead + "\x81\x0aabcd") // a 10-byte text frame, 4 bytes of it
	readN(t, c, len(wsHead)+6)

	done := drainSoon(t, ts, waitBound)
	stillOpen(t, c, "in the middle of a frame")
	srv.say <- []byte("efghij\x81\x03xyz") // the frame's end, and one more
	if got, want := readN(t, c, 6+4), "efghij\x88\x02\x03\xe9"; got != want {
		t.Fatalf("client got %q, want the frame's end and a Close 1001 %q", got, want)
	}
	stillOpen(t, c, "told goodbye, before its answer")
	srv.request(t, c, "\x88\x82mask\x00\x00") // the client's Close (masked)
	if got := readEOF(t, c); len(got) != 0 {
		t.Fatalf("client got %q after the Close frame, want nothing", got)
	}
	if err := within(t, srv.done, "the server's EOF"); err != nil {
		t.Fatalf("server: %v, want an orderly EOF", err)
	}
	if n := within(t, done, "the drain"); n != 0 {
		t.Fatalf("the drain reset %d connections, want 0", n)
	}
	if b := ts.Stats.BoundaryCloses.Load(); b != 1 {
		t.Fatalf("boundary closes %d, want 1", b)
	}
}

// TestWebSocketGoodbyeOnRestart: a shutdown's goodbye says 1012, at once
// when the stream stands between frames.
func TestWebSocketGoodbyeOnRestart(t *testing.T) {
	conns, h := scriptedServer()
	ts := newService(t, Settings{AppProtocol: l4.AppWebSocket}, startServer(t, h))
	c := ts.dial(t)
	srv := within(t, conns, "the server's connection")
	srv.say <- []byte(wsHead + "\x81\x02hi")
	readN(t, c, len(wsHead)+4)
	if n := ts.SayGoodbye(true); n != 1 {
		t.Fatalf("SayGoodbye asked %d, want 1", n)
	}
	if got, want := readN(t, c, 4), "\x88\x02\x03\xf4"; got != want {
		t.Fatalf("client got %q, want a Close 1012 %q", got, want)
	}
	c.CloseWrite() // a client that answers with its FIN
	readEOF(t, c)
	within(t, srv.done, "the server's EOF")
}

// TestLostFramingFallsBack: a postgres server that accepts TLS leaves
// nothing to follow: the close falls back to a FIN at once, counted.
func TestLostFramingFallsBack(t *testing.T) {
	conns, h := scriptedServer()
	ts := newService(t, Settings{AppProtocol: l4.AppPostgres}, startServer(t, h))
	c := ts.dial(t)
	srv := within(t, conns, "the server's connection")
	srv.request(t, c, "\x00\x00\x00\x08\x04\xd2\x16\x2f") // SSLRequest
	srv.say <- []byte("S\x16\x03\x03\x00\x05hello")
	readN(t, c, 11)
	testutil.Eventually(t, 5*time.Second, "the lost framing to be counted", func() bool { return ts.Stats.FramingLost.Load() == 1 })
	ts.CloseSome(ts.backends[0], 1, CloseFIN)
	readEOF(t, c)
	if f, b := ts.Stats.BoundaryFallbacks.Load(), ts.Stats.BoundaryCloses.Load(); f != 1 || b != 0 {
		t.Fatalf("fallbacks %d, boundary closes %d; want 1, 0", f, b)
	}
}

// TestNoBoundaryInTimeFallsBack: a session that stays in its transaction
// is closed anyway once the close's wait (idle_timeout here) is over.
func TestNoBoundaryInTimeFallsBack(t *testing.T) {
	conns, h := scriptedServer()
	ts := newService(t, Settings{AppProtocol: l4.AppPostgres, IdleTimeout: time.Hour}, startServer(t, h))
	c := ts.dial(t)
	srv := within(t, conns, "the server's connection")
	srv.say <- cat(pgMsg('R', 0, 0, 0, 0), pgMsg('Z', 'I'))
	srv.request(t, c, "BEGIN")
	srv.say <- pgMsg('Z', 'T')
	readN(t, c, 9+6+6)
	testutil.Eventually(t, 5*time.Second, "the ask", func() bool {
		return ts.svcAsk(closeAsk{why: l4.EndRebalance, wait: 200 * time.Millisecond}) == 1
	})
	readEOF(t, c)
	if f := ts.Stats.BoundaryFallbacks.Load(); f != 1 {
		t.Fatalf("fallbacks %d, want 1", f)
	}
}

// svcAsk asks every open connection of the service to close as k says;
// it returns how many it asked.
func (ts *testService) svcAsk(k closeAsk) int {
	n := 0
	ts.ev.loops.each(func(l *loop) {
		for c := range l.conns {
			if c.svc == ts.TCPService && c.app != nil && c.askClose(l, k) {
				n++
			}
		}
	})
	return n
}

// myPkt is a MySQL packet.
func myPkt(seq byte, payload ...byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

// TestMySQLCloseWaitsForTheResultSetsEnd: the EOF after the column
// definitions is not the end; the one after the rows, outside a
// transaction, is.
func TestMySQLCloseWaitsForTheResultSetsEnd(t *testing.T) {
	conns, h := scriptedServer()
	ts := newService(t, Settings{AppProtocol: l4.AppMySQL}, startServer(t, h))
	c := ts.dial(t)
	srv := within(t, conns, "the server's connection")
	hello := cat(myPkt(0, append([]byte{0x0a}, "11.8-MariaDB\x00"...)...), myPkt(2, 0, 0, 0, 2, 0, 0, 0))
	srv.say <- hello
	readN(t, c, len(hello))
	srv.request(t, c, "\x09\x00\x00\x00\x03SELECT 1")
	head := cat(myPkt(1, 1), myPkt(2, make([]byte, 20)...), myPkt(3, 0xfe, 0, 0, 2, 0), myPkt(4, 1, '1'))
	srv.say <- head
	readN(t, c, len(head))
	ts.CloseSome(ts.backends[0], 1, CloseFIN)
	stillOpen(t, c, "in the middle of a result set")
	end := myPkt(5, 0xfe, 0, 0, 2, 0)
	srv.say <- end
	if got := readEOF(t, c); string(got) != string(end) {
		t.Fatalf("client got %q before EOF, want the result set's end", got)
	}
	if b := ts.Stats.BoundaryCloses.Load(); b != 1 {
		t.Fatalf("boundary closes %d, want 1", b)
	}
}
