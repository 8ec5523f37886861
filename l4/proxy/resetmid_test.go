package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestBackendResetMidStream: a backend resets while bulk bytes move both
// ways (some of them waiting in l4lb's pipes for a client that has not
// read them yet). The client gets a reset (ECONNRESET, not a FIN), the
// connection is logged with end backend_reset, its pipes are closed
// (none lent, none left open beyond the pool's idle ones) and its
// descriptors too.
func TestBackendResetMidStream(t *testing.T) {
	const up, down = 1 << 20, 4 << 20
	reset := make(chan struct{})
	addr := startServer(t, func(c *net.TCPConn) {
		if _, err := io.CopyN(io.Discard, c, up); err != nil {
			return
		}
		buf := make([]byte, 64<<10)
		for sent := 0; sent < down; sent += len(buf) {
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
		<-reset
		c.SetLinger(0)
		c.Close()
	})
	log, logs := observed("web")
	pipes := NewPipePool(0)
	ts := newServiceLog(t, pipes, testLoops(t, pipes), ListenOptions{}, log, Settings{Name: "web", LogConnections: true}, addr)
	// Descriptors besides the pool's idle pipes (two each): the client's
	// and the backend's sockets come on top, and must go again.
	others := func() int { return openFDs(t) - 2*int(pipes.Open()) }
	fds := others()

	c := ts.dial(t)
	// The client sends its 1 MiB, then only reads: a write of its own
	// would consume the socket's pending error (ECONNRESET) before the
	// read sees it, and unread client bytes in l4lb's socket would turn
	// even a FIN into a reset (RFC 2525): either would hide what l4lb does.
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(make([]byte, up)); err != nil {
		t.Fatal(err)
	}
	// The backend has taken 1 MiB and sent 4 MiB that the client has not
	// read: some wait in kernel buffers, some in l4lb's pipe.
	testutil.Eventually(t, 5*time.Second, "4 MiB on its way to the client", func() bool {
		return ts.backends[0].Stats.BytesOut.Load() > 0 && ts.backends[0].Stats.BytesIn.Load() >= up
	})
	time.Sleep(100 * time.Millisecond)
	if ts.pipes.Lent() == 0 {
		t.Log("no pipe held bytes at the reset (the kernel buffers took them all)")
	}
	close(reset)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read %d bytes, then %v; want ECONNRESET", n, err)
	}
	c.Close()
	if m := loggedLine(t, logs, connLogMsg); m["end"] != "backend_reset" || m["backend"] != "b0" {
		t.Fatalf("logged end %v backend %v, want backend_reset b0: %v", m["end"], m["backend"], m)
	}
	ok := func() bool { return ts.Stats.Active.Load() == 0 && ts.pipes.Lent() == 0 && others() <= fds }
	for deadline := time.Now().Add(5 * time.Second); !ok() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !ok() {
		t.Fatalf("after the reset: %d active, %d pipes lent, %d descriptors open besides idle pipes (%d before)", ts.Stats.Active.Load(), ts.pipes.Lent(), others(), fds)
	}
	if open := ts.pipes.Open(); open > maxIdlePipes {
		t.Fatalf("%d pipes open after the reset", open)
	}
}
