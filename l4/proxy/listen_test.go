// Listener options: TCP_DEFER_ACCEPT as set at listen and on reload, and
// what it does to a client that sends nothing.

package proxy

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

// silentWait is how long a client that sends nothing must stay unaccepted
// on a deferring listener: well under the kernel's 1s SYN-ACK retransmit,
// after which it is accepted anyway.
const silentWait = 300 * time.Millisecond

// promptly bounds an accept that must not be deferred: under the 1s a
// deferred one takes, with room for a loaded CI machine.
const promptly = 700 * time.Millisecond

// TestListenDeferAcceptOption: ListenTCP sets TCP_DEFER_ACCEPT only when
// asked (the kernel reports back a value rounded to its retransmit steps).
func TestListenDeferAcceptOption(t *testing.T) {
	for _, on := range []bool{false, true} {
		ln, err := ListenTCP(netip.MustParseAddrPort("127.0.0.1:0"), ListenOptions{DeferAccept: on})
		if err != nil {
			t.Fatal(err)
		}
		got := deferAcceptOf(t, ln)
		ln.Close()
		if (got != 0) != on {
			t.Errorf("DeferAccept %v: TCP_DEFER_ACCEPT reads %d", on, got)
		}
	}
}

func deferAcceptOf(t *testing.T, ln *net.TCPListener) int {
	t.Helper()
	raw, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// TestDeferAcceptWaitsForData: with defer_accept a client that connects
// and sends nothing is not accepted (no backend is dialed for it) until
// the kernel gives up waiting, while one that sends a byte is served at
// once; without it the silent client is accepted at once.
func TestDeferAcceptWaitsForData(t *testing.T) {
	addr := startServer(t, echoHandler)
	t.Run("on", func(t *testing.T) {
		pipes := NewPipePool(0)
		ts := newServiceListen(t, pipes, testLoops(t, pipes), ListenOptions{DeferAccept: true}, Settings{}, addr)
		ts.dial(t)
		time.Sleep(silentWait)
		if n := ts.Stats.Accepted.Load(); n != 0 {
			t.Fatalf("a client that sent nothing was accepted within %v (accepted %d)", silentWait, n)
		}
		echoPromptly(t, ts.dial(t))
		if n := ts.Stats.Accepted.Load(); n != 1 {
			t.Fatalf("accepted %d after one client sent a byte, want 1", n)
		}
		testutil.Eventually(t, 5*time.Second, "the silent client accepted once the deferral ends", func() bool {
			return ts.Stats.Accepted.Load() == 2
		})
	})
	t.Run("off", func(t *testing.T) {
		ts := newService(t, Settings{}, addr)
		ts.dial(t)
		testutil.Eventually(t, promptly, "the silent client accepted", func() bool { return ts.Stats.Accepted.Load() == 1 })
	})
}

// TestSetDeferAcceptOnRunningService: a reload turns defer_accept on and
// off on the listener that keeps running.
func TestSetDeferAcceptOnRunningService(t *testing.T) {
	ts := newService(t, Settings{}, startServer(t, echoHandler))
	if err := ts.SetDeferAccept(true); err != nil {
		t.Fatal(err)
	}
	ts.dial(t)
	time.Sleep(silentWait)
	if n := ts.Stats.Accepted.Load(); n != 0 {
		t.Fatalf("turned on: a client that sent nothing was accepted within %v", silentWait)
	}
	testutil.Eventually(t, 5*time.Second, "the silent client accepted once the deferral ends", func() bool {
		return ts.Stats.Accepted.Load() == 1
	})
	if err := ts.SetDeferAccept(false); err != nil {
		t.Fatal(err)
	}
	ts.dial(t)
	testutil.Eventually(t, promptly, "turned off: the silent client accepted", func() bool { return ts.Stats.Accepted.Load() == 2 })
	echoPromptly(t, ts.dial(t))
}

// echoPromptly sends a byte through c and wants it back within promptly.
func echoPromptly(t *testing.T, c *net.TCPConn) {
	t.Helper()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(promptly))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("no echo within %v: %v", promptly, err)
	}
}
