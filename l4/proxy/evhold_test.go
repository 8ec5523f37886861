// failover_hold on the loops: a client held while every connect failed or
// no backend was eligible, released by the next snapshot, reset when the
// hold runs out.

package proxy

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// refusedAddr is a loopback address whose port refuses connects.
func refusedAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	return a
}

// TestFailoverHoldConnectFailed: the VIP lists one backend, which refuses
// (a primary gone before the checks notice). With failover_hold the
// client is held, not reset; it does not retry the same snapshot (one
// connect failure, however long it waits); the next snapshot (the
// promoted replica) gets it, with the byte it sent. Without the hold the
// client is reset at once: the first half can fail.
func TestFailoverHoldConnectFailed(t *testing.T) {
	live := startServer(t, echoHandler)
	t.Run("hold", func(t *testing.T) {
		ts := newService(t, Settings{FailoverHold: 5 * time.Second, Retries: 0}, refusedAddr(t))
		c := ts.dial(t)
		c.Write([]byte{7})
		testutil.Eventually(t, 2*time.Second, "the client held", func() bool { return ts.Stats.Held.Load() == 1 })
		time.Sleep(300 * time.Millisecond) // past a queuePoll: a held client must not redial the failed snapshot
		if f, h := ts.Stats.ConnectFails.Load(), ts.Stats.Holding.Load(); f != 1 || h != 1 {
			t.Fatalf("held on the failed snapshot: %d connect failures, holding %d; want 1, 1", f, h)
		}
		ts.setBackends(t, live)
		ts.ServeQueue() // what the plane's Publish does
		if !echoed(c, 7, 5*time.Second) {
			t.Fatal("held client not served by the new snapshot")
		}
		if r, h, nb := ts.Stats.HoldReleased.Load(), ts.Stats.Holding.Load(), ts.Stats.NoBackend.Load(); r != 1 || h != 0 || nb != 0 {
			t.Fatalf("released %d, holding %d, no_backend %d; want 1, 0, 0", r, h, nb)
		}
	})
	t.Run("off", func(t *testing.T) {
		ts := newService(t, Settings{Retries: 0}, refusedAddr(t))
		c, err := net.DialTimeout("tcp4", ts.addr.String(), 2*time.Second)
		switch {
		case err == nil:
			defer c.Close()
			readReset(t, c, "client without the hold")
		case !errors.Is(err, syscall.ECONNRESET): // the reset may beat the dial's own check
			t.Fatalf("dial: %v", err)
		}
		testutil.Eventually(t, 2*time.Second, "the reset counted", func() bool { return ts.Stats.NoBackend.Load() == 1 })
		if ts.Stats.Held.Load() != 0 || ts.Stats.NoBackend.Load() != 1 {
			t.Fatalf("held %d, no_backend %d; want 0, 1", ts.Stats.Held.Load(), ts.Stats.NoBackend.Load())
		}
	})
}

// TestFailoverHoldExpires: with no eligible backend at all, a held client
// is reset when failover_hold runs out (not before), counted as expired.
func TestFailoverHoldExpires(t *testing.T) {
	const hold = 300 * time.Millisecond
	ts := newService(t, Settings{FailoverHold: hold})
	start := time.Now()
	c := ts.dial(t)
	readReset(t, c, "held client")
	if took := time.Since(start); took < hold {
		t.Fatalf("reset after %v, before failover_hold %v", took, hold)
	}
	testutil.Eventually(t, 2*time.Second, "expiry counted", func() bool {
		return ts.Stats.HoldExpired.Load() == 1 && ts.Stats.Holding.Load() == 0 && ts.Queued() == 0
	})
}
