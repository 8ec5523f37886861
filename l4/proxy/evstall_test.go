package proxy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

// setHooks changes every loop's fault-injection hooks, on the loops.
func setHooks(ls *Loops, fn func(h *loopHooks)) {
	ls.each(func(l *loop) { fn(&l.hooks) })
}

// signalStorm sends SIGURG (the Go runtime's preemption signal, harmless
// to any thread) to loop l's thread about every 50µs until the test ends.
func signalStorm(t *testing.T, l *loop) *atomic.Int64 {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "the loop records its thread", func() bool { return l.shared.tid.Load() != 0 })
	tid := int(l.shared.tid.Load())
	var sent atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if unix.Tgkill(os.Getpid(), tid, unix.SIGURG) == nil {
				sent.Add(1)
			}
			ts := unix.NsecToTimespec(int64(50 * time.Microsecond))
			unix.Nanosleep(&ts, nil) // finer than Go's timers
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return &sent
}

// readProgress reads c to its end into h, failing the test when no byte
// comes for quiet (a stall), and returns how many bytes came. With pause,
// it reads at most 64 KiB at a time and sleeps pause before each read.
func readProgress(t *testing.T, c net.Conn, h io.Writer, quiet, pause time.Duration) int64 {
	t.Helper()
	buf := make([]byte, 256<<10)
	if pause > 0 {
		buf = buf[:64<<10]
	}
	var got int64
	for {
		if pause > 0 {
			time.Sleep(pause)
		}
		c.SetReadDeadline(time.Now().Add(quiet))
		n, err := c.Read(buf)
		h.Write(buf[:n])
		got += int64(n)
		switch {
		case err == io.EOF:
			return got
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Fatalf("no byte for %v after %d: the transfer stalled", quiet, got)
		case err != nil:
			t.Fatalf("read after %d bytes: %v", got, err)
		}
	}
}

// TestShortSpliceUnderSignals shows the cause of the lost wake-up that
// evstall.go once papered over. A bulk transfer splices through a pipe to
// a client that reads 64 KiB a millisecond (slower than the backend
// sends, so the loop's socket to it is often near full) while the loop's
// thread is signalled about every 50µs, as the Go runtime signals
// a thread it wants to preempt (more often on a busy machine). splice(2)
// from a pipe to a socket returns short when a signal is pending between
// the socket writes it makes of the pipe's pages, with room left in the
// socket, and no EPOLLOUT edge follows. With the stall guard off, the
// loop that took a short splice for a full socket stalled for good in 5
// of 5 runs (10 s without a byte), and in none of 3 without the signals;
// the loop that writes on until EAGAIN moves every byte.
func TestShortSpliceUnderSignals(t *testing.T) {
	const size = 128 << 20
	sent := make(chan [32]byte, 1)
	addr := startServer(t, func(c *net.TCPConn) {
		sent <- sendRandom(c, size)
		c.Close()
	})
	pipes := NewPipePool(0)
	ls := newLoopsForTest(t, 1, pipes)
	setHooks(ls, func(h *loopHooks) { h.noStallCheck = true })
	ts := newServiceOn(t, pipes, ls, Settings{}, addr)
	signals := signalStorm(t, ls.loops[0])
	c := ts.dial(t)
	c.CloseWrite()
	h := sha256.New()
	if n := readProgress(t, c, h, 10*time.Second, time.Millisecond); n != size {
		t.Fatalf("client read %d bytes, want %d", n, size)
	}
	if got, want := h.Sum(nil), within(t, sent, "the backend's checksum"); !bytes.Equal(got, want[:]) {
		t.Fatal("the bytes differ")
	}
	if ts.spliced.Load() == 0 {
		t.Fatal("nothing was spliced: the test did not exercise the splice path")
	}
	t.Logf("%d MiB moved, %d MiB spliced, %d signals to the loop's thread", size>>20, ts.spliced.Load()>>20, signals.Load())
}

// blockedToClient opens a connection through a one-loop service whose
// backend sends size bytes to a client that reads nothing yet (small
// buffers, so that l4lb holds what waits), and waits until forwarding
// stalls on the client. It returns the client, the service and the
// backend's checksum.
func blockedToClient(t *testing.T, size int64, setup func(h *loopHooks)) (*net.TCPConn, *testService, <-chan [32]byte) {
	t.Helper()
	sent := make(chan [32]byte, 1)
	addr := startServer(t, func(c *net.TCPConn) {
		sent <- sendRandom(c, size)
		c.Close()
	})
	pipes := NewPipePool(0)
	ls := newLoopsForTest(t, 1, pipes)
	if setup != nil {
		setHooks(ls, setup)
	}
	ts := newServiceOn(t, pipes, ls, Settings{}, addr)
	if err := unix.SetsockoptInt(ts.ev.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	small := func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}
	d := net.Dialer{Control: small}
	conn, err := d.Dial("tcp4", ts.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	c := conn.(*net.TCPConn)
	t.Cleanup(func() { c.Close() })
	c.CloseWrite()
	b := ts.backends[0]
	testutil.Eventually(t, 10*time.Second, "forwarding stalls on the client", func() bool {
		before := b.Stats.BytesOut.Load()
		time.Sleep(100 * time.Millisecond)
		return b.Stats.BytesOut.Load() == before && before > 0
	})
	return c, ts, sent
}

// dropNextOut makes the loop drop the next EPOLLOUT edge of a
// connection's client socket once armed, as a kernel that lost it would.
type dropNextOut struct {
	armed   atomic.Bool
	dropped atomic.Int64
}

func (d *dropNextOut) events(_ *evConn, backend bool, ev uint32) uint32 {
	if !backend && ev&unix.EPOLLOUT != 0 && d.armed.CompareAndSwap(true, false) {
		d.dropped.Add(1)
		return ev &^ unix.EPOLLOUT
	}
	return ev
}

// TestStallGuardRepairsLostEdge: an EPOLLOUT edge the loop never sees
// (dropped by a hook) leaves a direction with bytes for a client that can
// take them; the guard finds it within a few seconds, counts one lost
// wake-up and moves the bytes on, and every byte arrives.
func TestStallGuardRepairsLostEdge(t *testing.T) {
	drop := &dropNextOut{}
	c, ts, sent := blockedToClient(t, 8<<20, func(h *loopHooks) { h.events = drop.events })
	drop.armed.Store(true)
	h := sha256.New()
	if n := readProgress(t, c, h, waitBound, 0); n != 8<<20 {
		t.Fatalf("client read %d bytes", n)
	}
	if got, want := h.Sum(nil), within(t, sent, "the backend's checksum"); !bytes.Equal(got, want[:]) {
		t.Fatal("the bytes differ")
	}
	if drop.dropped.Load() != 1 {
		t.Fatalf("%d edges dropped, want 1", drop.dropped.Load())
	}
	if n := ts.Stats.LostWakeups.Load(); n != 1 {
		t.Fatalf("lost wake-ups counted: %d, want 1", n)
	}
}

// TestStallKickEndsConnection is the path that crashed the daemon in CI:
// the guard moves a connection on while its client resets, so the pump
// ends and frees the connection. Nothing may touch it after: the guard
// counted and logged before the pump, the connection's accounting ends
// once, and the loop goes on serving.
func TestStallKickEndsConnection(t *testing.T) {
	drop := &dropNextOut{}
	var kicked atomic.Int64
	var client atomic.Pointer[net.TCPConn]
	kick := func(c *evConn) {
		kicked.Add(1)
		cl := client.Load()
		cl.SetLinger(0)
		cl.Close() // a reset
		// The pump must meet the reset: wait until the loop's socket has it.
		fds := []unix.PollFd{{Fd: int32(c.clientSock.fd), Events: unix.POLLIN}}
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			if n, _ := unix.Poll(fds, 100); n == 1 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
				return
			}
		}
	}
	c, ts, _ := blockedToClient(t, 8<<20, func(h *loopHooks) { h.events, h.kick = drop.events, kick })
	client.Store(c)
	drop.armed.Store(true)
	// Read a little so that the socket has room and the dropped edge
	// would have come; then stop reading: the kick resets the client.
	c.SetReadDeadline(time.Now().Add(waitBound))
	if _, err := c.Read(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitBound, "the guard kicks the connection", func() bool { return kicked.Load() > 0 })
	testutil.Eventually(t, 5*time.Second, "the connection ends", func() bool { return ts.Stats.Active.Load() == 0 })
	if n := ts.Stats.LostWakeups.Load(); n != 1 {
		t.Fatalf("lost wake-ups counted: %d, want 1", n)
	}
	if b := ts.backends[0]; b.LiveFlows() != 0 {
		t.Fatalf("backend holds %d live flows", b.LiveFlows())
	}
	// The loop still serves.
	echo := startServer(t, echoHandler)
	ts.setBackends(t, echo)
	echoOnce(t, ts.dial(t), "still serving")
}

// TestSlowOrSilentPeerIsNoLostWakeup: a client that reads nothing, or
// reads a trickle, keeps a direction blocked for seconds while bytes move
// the other way; none of it is a lost wake-up (the guard once counted
// both, D12 of the operator's trial).
func TestSlowOrSilentPeerIsNoLostWakeup(t *testing.T) {
	for _, trickle := range []bool{false, true} {
		name := "silent"
		if trickle {
			name = "trickle"
		}
		t.Run(name, func(t *testing.T) {
			// The backend sends 4 MiB, then echoes; the client reads
			// nothing (or 1 KiB every 50 ms) while it sends.
			addr := startServer(t, func(c *net.TCPConn) {
				sendRandom(c, 4<<20)
				io.Copy(c, c)
			})
			pipes := NewPipePool(0)
			ts := newServiceOn(t, pipes, newLoopsForTest(t, 1, pipes), Settings{}, addr)
			c := ts.dial(t)
			stop := time.Now().Add(3500 * time.Millisecond)
			buf := make([]byte, 1024)
			for time.Now().Before(stop) {
				c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
				c.Write(buf) // the up direction moves, until the echo fills up
				if trickle {
					c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
					c.Read(buf)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if n := ts.Stats.LostWakeups.Load(); n != 0 {
				t.Fatalf("%d lost wake-ups counted for a peer that reads slowly or not at all", n)
			}
		})
	}
}
