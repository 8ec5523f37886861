// A reset from either side reaches the other side as a reset (ECONNRESET,
// not an orderly EOF), whichever way the proxy learns of it: an error
// event on the reset socket, a read or splice from it that fails, or a
// write or splice to it that fails; with the bytes in flight moving by
// copy or by splice.

package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// How the proxy learns of a peer's reset.
const (
	// viaEvent: epoll reports the error on the reset socket (the loop was
	// idle when it came), with bytes toward the other side held in l4lb.
	viaEvent = "event"
	// viaRead: a read or splice from the reset socket fails. The loop
	// reads it first because the other side's event comes first: it
	// made room for bytes l4lb held, and the reset socket may have more.
	viaRead = "read"
	// viaWrite: a write or splice to the reset socket fails. The other
	// side's bytes (to be written there) came first.
	viaWrite = "write"
)

// TestResetFromBackendReachesClient: the backend resets; the client
// reads a reset, on every path the proxy can learn it by.
func TestResetFromBackendReachesClient(t *testing.T) { testResetPaths(t, true) }

// TestResetFromClientReachesBackend: the client resets; the backend
// reads a reset, on every path.
func TestResetFromClientReachesBackend(t *testing.T) { testResetPaths(t, false) }

func testResetPaths(t *testing.T, backendResets bool) {
	for _, via := range []string{viaEvent, viaRead, viaWrite} {
		for _, splice := range []bool{false, true} {
			name := via + "/copy"
			if splice {
				name = via + "/splice"
			}
			t.Run(name, func(t *testing.T) {
				f := newResetFixture(t, backendResets, splice)
				switch via {
				case viaEvent, viaRead:
					f.resetWithBytesHeld(t, via == viaRead)
				case viaWrite:
					f.resetUnderWrite(t)
				}
				f.otherSideSeesReset(t)
			})
		}
	}
}

// resetFixture is one connection through a one-loop service, with both
// of its ends in the test's hands: x is the side that resets, y the other.
// Both ends have small receive buffers (so that l4lb soon holds what they
// do not read).
type resetFixture struct {
	ts     *testService
	l      *loop
	splice bool
	x, y   *net.TCPConn
	// xBackend: x is the backend (the client resets otherwise).
	xBackend bool
}

// smallRcvBuf is the receive buffer of the test's sockets (the kernel
// doubles it).
const smallRcvBuf = 4096

func setRcvBuf(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, smallRcvBuf) })
	return errors.Join(err, serr)
}

func newResetFixture(t *testing.T, xBackend, splice bool) *resetFixture {
	t.Helper()
	pipes := NewPipePool(0)
	loops, err := NewLoops(1, pipes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(loops.Close)
	if !splice {
		// The copy path: max_pipes reached, so held bytes wait in a
		// buffer of the connection's own and every chunk is copied.
		held, err := pipes.get(0)
		if err != nil {
			t.Fatal(err)
		}
		pipes.SetMax(1)
		t.Cleanup(func() { pipes.put(0, held) })
	}
	lc := net.ListenConfig{Control: setRcvBuf} // accepted sockets inherit it
	ln, err := lc.Listen(t.Context(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c.(*net.TCPConn)
		}
	}()
	ts := newServiceLog(t, pipes, loops, ListenOptions{}, nil, Settings{}, ln.Addr().(*net.TCPAddr).AddrPort())
	d := net.Dialer{Timeout: 2 * time.Second, Control: setRcvBuf}
	cc, err := d.Dial("tcp4", ts.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	client := cc.(*net.TCPConn)
	t.Cleanup(func() { client.Close() })
	backend := within(t, accepted, "the backend's accept")
	t.Cleanup(func() { backend.Close() })
	for _, c := range []*net.TCPConn{client, backend} {
		c.SetDeadline(time.Now().Add(waitBound))
	}
	// One byte each way: the connection is open both ways.
	mustSend(t, client, backend, []byte("c"))
	mustSend(t, backend, client, []byte("b"))

	f := &resetFixture{ts: ts, l: loops.loops[0], splice: splice, x: client, y: backend, xBackend: xBackend}
	if xBackend {
		f.x, f.y = backend, client
	}
	return f
}

// mustSend writes b on from and reads it at to.
func mustSend(t *testing.T, from, to *net.TCPConn, b []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { _, err := from.Write(b); errc <- err }()
	got := make([]byte, len(b))
	if _, err := io.ReadFull(to, got); err != nil {
		t.Fatalf("reading %d bytes sent through l4lb: %v", len(b), err)
	}
	if err := within(t, errc, "the write"); err != nil {
		t.Fatal(err)
	}
}

// sides returns the connection's sockets toward x and toward y, and the
// directions from x (to y) and from y (to x).
func (f *resetFixture) sides(c *evConn) (px, py *sock, fromX, fromY *evDir) {
	if f.xBackend {
		return &c.backendSock, &c.clientSock, &c.down, &c.up
	}
	return &c.clientSock, &c.backendSock, &c.up, &c.down
}

// onLoop runs fn on the fixture's loop with its one connection; the loop
// does nothing else meanwhile (events queue up in the order they come).
// fn's error fails the test.
func (f *resetFixture) onLoop(t *testing.T, fn func(c *evConn) error) {
	t.Helper()
	errc := make(chan error, 1)
	f.l.post(func() {
		if len(f.l.conns) != 1 {
			errc <- fmt.Errorf("%d connections on the loop, want 1", len(f.l.conns))
			return
		}
		for c := range f.l.conns {
			errc <- fn(c)
		}
	})
	if err := within(t, errc, "the loop to run the test's step"); err != nil {
		t.Fatal(err)
	}
}

// resetWithBytesHeld: x sends 64 KiB, which l4lb reads at once (one full
// chunk) and cannot pass on to y, which does not read: l4lb holds the rest
// (in a pipe, or its own buffer on the copy path) and x's socket stays
// readable as far as l4lb knows. Then x resets. With first, y's side
// first gets room for what l4lb holds (its send buffer grows): l4lb passes
// it on and reads x's socket again, before it sees the error event, and
// the read fails. Without, the loop just sees the error event.
func (f *resetFixture) resetWithBytesHeld(t *testing.T, readFirst bool) {
	t.Helper()
	const chunk = copyChunk // read whole by the first read: it does not end x's readability
	f.onLoop(t, func(c *evConn) error {
		_, py, _, _ := f.sides(c)
		// A small send buffer toward y: with y's small receive buffer,
		// l4lb can pass on only a few KiB of the chunk.
		if err := unix.SetsockoptInt(py.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
			return err
		}
		// x's chunk arrives whole before the loop reads it.
		if _, err := f.x.Write(make([]byte, chunk)); err != nil {
			return err
		}
		return waitFor(func() bool { return outq(f.x) == 0 }, "x's chunk to reach l4lb")
	})
	f.onLoop(t, func(c *evConn) error {
		px, py, fromX, _ := f.sides(c)
		switch {
		case fromX.pending == 0 || py.writable:
			return fmt.Errorf("l4lb passed x's chunk on (pending %d): y's side did not fill", fromX.pending)
		case !px.readable || inq(px.fd) != 0:
			return fmt.Errorf("x's socket: readable %v with %d bytes queued; want readable and empty", px.readable, inq(px.fd))
		case (fromX.pipe != nil) != f.splice:
			return fmt.Errorf("held bytes in a pipe: %v, want %v (splice path)", fromX.pipe != nil, f.splice)
		}
		if readFirst {
			// y's side gets room first: its writable event is queued
			// before x's error.
			if err := unix.SetsockoptInt(py.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20); err != nil {
				return err
			}
			if err := waitPoll(py.fd, unix.POLLOUT, "y's side writable"); err != nil {
				return err
			}
		}
		return f.resetX(px)
	})
}

// resetUnderWrite: y sends a few bytes (on the splice path, after 64 KiB
// that make the direction splice), and x resets before the loop reads
// them: the loop sees y's bytes first, reads them and fails to write them
// to x.
func (f *resetFixture) resetUnderWrite(t *testing.T) {
	t.Helper()
	size := 5
	if f.splice {
		mustSend(t, f.y, f.x, make([]byte, copyChunk))
		size = 20 << 10
	}
	f.onLoop(t, func(c *evConn) error {
		px, py, _, fromY := f.sides(c)
		switch {
		case fromY.splice != f.splice:
			return fmt.Errorf("direction from y splices: %v, want %v", fromY.splice, f.splice)
		case fromY.pending != 0 || !px.writable || px.readable:
			return fmt.Errorf("toward x: %d bytes pending, writable %v, x readable %v; want 0, true, false", fromY.pending, px.writable, px.readable)
		}
		if _, err := f.y.Write(make([]byte, size)); err != nil {
			return err
		}
		if err := waitFor(func() bool { return inq(py.fd) == size }, "y's bytes to reach l4lb"); err != nil {
			return err
		}
		return f.resetX(px)
	})
}

// resetX resets x's end and waits until l4lb's socket toward x has the
// error (px is that socket; the caller runs on the loop).
func (f *resetFixture) resetX(px *sock) error {
	if err := f.x.SetLinger(0); err != nil {
		return err
	}
	if err := f.x.Close(); err != nil {
		return err
	}
	return waitPoll(px.fd, unix.POLLERR, "the reset to reach l4lb")
}

// otherSideSeesReset: y reads what l4lb passes on and then a reset, not
// an orderly end.
func (f *resetFixture) otherSideSeesReset(t *testing.T) {
	t.Helper()
	f.y.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, f.y)
	if !errors.Is(err, syscall.ECONNRESET) {
		who := "client"
		if !f.xBackend {
			who = "backend"
		}
		t.Fatalf("the %s read %d bytes, then %v; want a reset (ECONNRESET)", who, n, err)
	}
}

// waitFor polls cond (on the loop: without yielding to it) until it
// holds, for at most waitStep.
func waitFor(cond func() bool, what string) error {
	for deadline := time.Now().Add(waitStep); !cond(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v", what, waitStep)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// waitStep bounds each wait of the reset tests.
const waitStep = 5 * time.Second

// waitPoll waits until fd reports events (poll(2), which consumes
// nothing: not the socket's error either).
func waitPoll(fd int, events int16, what string) error {
	return waitFor(func() bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(pfd, 0)
		return err == nil && n == 1 && pfd[0].Revents&events != 0
	}, what)
}

// inq is how many bytes wait to be read on fd.
func inq(fd int) int {
	n, _ := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return n
}

// outq is how many bytes c has sent that its peer has not acknowledged.
func outq(c *net.TCPConn) int {
	n := -1
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
	}
	return n
}
