// CloseSome: which connections it ends, and that a FIN close resets no one.

package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// backendEnd is what a backend connection saw: the bytes it read until
// EOF, and the error that ended its reading and writing (nil: an orderly
// EOF and every write taken).
type backendEnd struct {
	read []byte
	err  error
}

// greetThenRead writes greeting, then reads until EOF.
func greetThenRead(greeting []byte, ends chan<- backendEnd) func(c *net.TCPConn) {
	return func(c *net.TCPConn) {
		_, werr := c.Write(greeting)
		b, rerr := io.ReadAll(c)
		ends <- backendEnd{read: b, err: errors.Join(werr, rerr)}
	}
}

// readEOF reads until the connection ends and fails unless it ended with
// an orderly EOF.
func readEOF(t *testing.T, c *net.TCPConn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("client read: %v after %d bytes, want an orderly EOF", err, len(b))
	}
	return b
}

func TestCloseSomeSendsFINBothWays(t *testing.T) {
	ends := make(chan backendEnd, 1)
	ts := newService(t, Settings{}, startServer(t, greetThenRead([]byte("hi\n"), ends)))
	c := ts.dial(t)
	if got := readN(t, c, 3); got != "hi\n" {
		t.Fatalf("greeting %q", got)
	}
	if n := ts.CloseSome(ts.backends[0], 5, CloseFIN); n != 1 {
		t.Fatalf("CloseSome closed %d, want the 1 there is", n)
	}
	if live := ts.backends[0].LiveFlows(); live != 0 {
		t.Fatalf("live flows %d once the close began, want 0", live)
	}
	readEOF(t, c)
	// What the client sends after the FIN is dropped: the backend got its
	// FIN already and sees nothing more.
	c.Write([]byte("late"))
	c.CloseWrite()
	end := within(t, ends, "the backend's end")
	if end.err != nil || len(end.read) != 0 {
		t.Fatalf("backend: read %q, %v; want an orderly EOF and nothing else", end.read, end.err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client read after its own FIN: %d %v, want EOF (no reset)", n, err)
	}
	testutil.Eventually(t, 5*time.Second, "the connection to end", func() bool { return ts.Conns() == 0 })
}

// TestCloseSomeFlushesWhatItHolds: bytes the proxy read from the backend
// but could not yet write to a client that does not read reach the client
// before its FIN; the backend is never reset either.
func TestCloseSomeFlushesWhatItHolds(t *testing.T) {
	pattern := bytes.Repeat([]byte("0123456789abcdef"), 2<<20) // 32 MiB
	ends := make(chan backendEnd, 1)
	ts := newService(t, Settings{}, startServer(t, greetThenRead(pattern, ends)))
	c := ts.dial(t)
	// The client reads nothing: the proxy holds what its socket does not
	// take. Count what it wrote so far.
	time.Sleep(200 * time.Millisecond)
	written := ts.backends[0].Stats.BytesOut.Load()
	if n := ts.CloseSome(ts.backends[0], 1, CloseFIN); n != 1 {
		t.Fatalf("CloseSome closed %d", n)
	}
	got := readEOF(t, c)
	if !bytes.Equal(got, pattern[:len(got)]) {
		t.Fatalf("client got %d bytes, not a prefix of what the backend sent", len(got))
	}
	if uint64(len(got)) <= written {
		t.Fatalf("client got %d bytes, no more than were written before the close (%d): what the proxy held was lost", len(got), written)
	}
	c.Close()
	if end := within(t, ends, "the backend's end"); end.err != nil {
		t.Fatalf("backend: %v, want its writes taken and an orderly EOF", end.err)
	}
	testutil.Eventually(t, 5*time.Second, "the connection to end", func() bool { return ts.Conns() == 0 })
}

// TestCloseSomeOrder: idle connections go before busy ones, the oldest
// first within each.
func TestCloseSomeOrder(t *testing.T) {
	ts := newService(t, Settings{}, startServer(t, echoHandler))
	var cs []*net.TCPConn
	for range 3 {
		c := ts.dial(t)
		echoOnce(t, c, "x") // established through to the backend
		cs = append(cs, c)
		time.Sleep(20 * time.Millisecond)
	}
	ended := func(c *net.TCPConn) bool {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF
	}
	// All busy (they just moved bytes): the oldest goes.
	ts.CloseSome(ts.backends[0], 1, CloseFIN)
	if !ended(cs[0]) || ended(cs[1]) || ended(cs[2]) {
		t.Fatal("the oldest connection was not the one closed")
	}
	// cs[1] is busy, cs[2] idle: the idle one goes although younger.
	time.Sleep(quietFor + 100*time.Millisecond)
	echoOnce(t, cs[1], "y")
	ts.CloseSome(ts.backends[0], 1, CloseFIN)
	if ended(cs[1]) || !ended(cs[2]) {
		t.Fatal("the idle connection was not the one closed")
	}
}

func TestCloseSomeReset(t *testing.T) {
	ts := newService(t, Settings{}, startServer(t, echoHandler))
	c := ts.dial(t)
	echoOnce(t, c, "x")
	if n := ts.CloseSome(ts.backends[0], 1, CloseReset); n != 1 {
		t.Fatalf("CloseSome closed %d", n)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read: %v, want a reset", err)
	}
}

// TestClosingConnectionLingersBounded: a client that never closes after
// the FIN holds the connection for at most its idle timeout (below
// closeLinger).
func TestClosingConnectionLingersBounded(t *testing.T) {
	ts := newService(t, Settings{IdleTimeout: 300 * time.Millisecond}, startServer(t, echoHandler))
	c := ts.dial(t)
	echoOnce(t, c, "x")
	start := time.Now()
	ts.CloseSome(ts.backends[0], 1, CloseFIN)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("client read: %v, want EOF", err)
	}
	testutil.Eventually(t, 5*time.Second, "the lingering connection to end", func() bool { return ts.Conns() == 0 })
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("ended after %v: the client had not closed, it should have lingered", d)
	}
}

func readN(t *testing.T, c *net.TCPConn, n int) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}
