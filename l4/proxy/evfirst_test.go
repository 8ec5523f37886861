package proxy

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// silentUntilEnd connects to ts and sends nothing; it returns how the
// connection ended (nil: a FIN) and after how long.
func silentUntilEnd(t *testing.T, ts *testService) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	c := ts.dial(t)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if len(b) != 0 {
		t.Fatalf("silent client read %q", b)
	}
	return time.Since(start), err
}

// TestFirstByteTimeout: a client that sends nothing is closed with a FIN
// after first_byte_timeout, counted, and no backend ever sees it; a
// client that speaks within it is proxied byte-exact; behind a PROXY
// header the wait starts after the header.
func TestFirstByteTimeout(t *testing.T) {
	const wait = 300 * time.Millisecond
	t.Run("silent", func(t *testing.T) {
		addr, _, conns := recordServer(t)
		ts := newService(t, Settings{FirstByteTimeout: wait}, addr)
		took, err := silentUntilEnd(t, ts)
		if err != nil {
			t.Fatalf("client: %v; want a FIN", err)
		}
		if took < wait || took > wait+2*time.Second {
			t.Fatalf("closed after %v, want about %v", took, wait)
		}
		testutil.Eventually(t, 2*time.Second, "timeout counted, connection ended", func() bool {
			return ts.Stats.FirstByteTimeouts.Load() == 1 && ts.Stats.Active.Load() == 0
		})
		if n := conns.Load(); n != 0 {
			t.Fatalf("%d backend connections for a silent client", n)
		}
	})
	t.Run("speaks in time", func(t *testing.T) {
		addr, got, conns := recordServer(t)
		ts := newService(t, Settings{FirstByteTimeout: wait}, addr)
		c := ts.dial(t)
		time.Sleep(wait / 3)
		if n := conns.Load(); n != 0 {
			t.Fatalf("backend dialed before the client's first byte (%d connections)", n)
		}
		payload := []byte("GET / HTTP/1.0\r\n\r\n")
		c.Write(payload[:3])
		time.Sleep(wait) // the first byte ended the wait: no timeout now
		c.Write(payload[3:])
		c.CloseWrite()
		if b := readEnd(c); string(b) != "ok" {
			t.Fatalf("client read %q", b)
		}
		if b := <-got; string(b) != string(payload) {
			t.Fatalf("backend got %q", b)
		}
		if n := ts.Stats.FirstByteTimeouts.Load(); n != 0 {
			t.Fatalf("%d first-byte timeouts", n)
		}
	})
	t.Run("after a PROXY header", func(t *testing.T) {
		addr, _, conns := recordServer(t)
		ts := newService(t, Settings{FirstByteTimeout: wait, AcceptProxy: AcceptProxyV1, AcceptProxyFrom: loopback}, addr)
		c := ts.dial(t)
		c.Write([]byte("PROXY TCP4 203.0.113.7 198.18.0.10 40001 80\r\n"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("client: %v; want a FIN", err)
		}
		if ts.Stats.FirstByteTimeouts.Load() != 1 || conns.Load() != 0 {
			t.Fatalf("timeouts %d, backend connections %d", ts.Stats.FirstByteTimeouts.Load(), conns.Load())
		}
	})
}

// TestFirstByteTimeoutReload: a reload that sets, then clears, the
// timeout applies to connections accepted from then on.
func TestFirstByteTimeoutReload(t *testing.T) {
	addr, _, conns := recordServer(t)
	ts := newService(t, Settings{}, addr)
	before := ts.dial(t) // off: dialed at once, never timed out
	testutil.Eventually(t, 2*time.Second, "backend dialed for a silent client while off", func() bool { return conns.Load() == 1 })
	ts.Update(Settings{FirstByteTimeout: 100 * time.Millisecond})
	if _, err := silentUntilEnd(t, ts); err != nil {
		t.Fatalf("client: %v; want a FIN", err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d backend connections, want the first only", n)
	}
	ts.Update(Settings{})
	after := ts.dial(t)
	testutil.Eventually(t, 2*time.Second, "backend dialed again once off", func() bool { return conns.Load() == 2 })
	time.Sleep(300 * time.Millisecond)
	if n := ts.Stats.FirstByteTimeouts.Load(); n != 1 {
		t.Fatalf("%d first-byte timeouts, want 1", n)
	}
	for _, c := range []net.Conn{before, after} {
		c.(*net.TCPConn).CloseWrite()
		if b := readEnd(c); string(b) != "ok" {
			t.Fatalf("a connection opened while off read %q", b)
		}
	}
}

// TestFirstByteWaitAllocatesNothing: a connection that waits for its
// first byte (on the loop's timer heap) and one closed for silence cost
// the loop no allocation.
func TestFirstByteWaitAllocatesNothing(t *testing.T) {
	loopConnAllocsPause(t, Settings{FirstByteTimeout: time.Second}, nil, 200*time.Microsecond)

	pipes := NewPipePool(0)
	ts := newServiceOn(t, pipes, newLoopsForTest(t, 1, pipes), Settings{FirstByteTimeout: time.Millisecond}, rawEchoServer(t))
	vip := &unix.SockaddrInet4{Port: int(ts.addr.Port()), Addr: ts.addr.Addr().As4()}
	buf := make([]byte, 1)
	tv := unix.NsecToTimeval(int64(5 * time.Second)) // every wait has a deadline
	silent := func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, vip); err != nil {
			t.Fatal(err)
		}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			t.Fatal(err)
		}
		if n, err := readBlocking(fd, buf); n != 0 || err != nil {
			t.Fatalf("silent client read %d bytes, %v; want a FIN", n, err)
		}
	}
	for range warmConns {
		silent()
	}
	const n = 500
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		silent()
	}
	runtime.ReadMemStats(&after)
	if a := after.Mallocs - before.Mallocs; a > n/50 {
		t.Fatalf("%d allocations for %d connections closed for silence", a, n)
	}
	if got := ts.Stats.FirstByteTimeouts.Load(); got != warmConns+n {
		t.Fatalf("%d first-byte timeouts, want %d", got, warmConns+n)
	}
}

// The end reason's name is what the log and the docs use.
func TestFirstByteEndName(t *testing.T) {
	if s := l4.EndFirstByte.String(); s != "first_byte_timeout" {
		t.Fatal(s)
	}
}

// readBlocking is a blocking read that retries EINTR (a socket with
// SO_RCVTIMEO gets it on every signal, SA_RESTART or not).
func readBlocking(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		if err != unix.EINTR {
			return n, err
		}
	}
}
