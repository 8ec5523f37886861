// Tests of the sweeper: per-protocol expiry, bounded work, lifecycle, no leaks.

package conntrack

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

func TestIdleExpiryPerProtocol(t *testing.T) {
	tests := []struct {
		name    string
		proto   l4.Protocol
		advance time.Duration
		alive   bool
	}{
		{"udp before timeout", l4.UDP, 29 * time.Second, true},
		{"udp at timeout", l4.UDP, 30 * time.Second, false},
		{"tcp outlives udp timeout", l4.TCP, time.Minute, true},
		{"tcp before timeout", l4.TCP, 9*time.Minute + 59*time.Second, true},
		{"tcp after timeout", l4.TCP, 11 * time.Minute, false},
		{"other protocol uses udp timeout", 132, 31 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk, rec := newFakeClock(), newRecorder()
			tb := mustNew(t, rec.hook(Options{
				TCPIdle: 10 * time.Minute, UDPIdle: 30 * time.Second, Now: clk.Now,
			}))
			bs, vip := newBackends(1)
			k := flowKey(1, tt.proto)
			insertPicked(t, tb, k, bs[0], nil)
			clk.Advance(tt.advance)
			tb.Sweep()
			if _, ok := tb.Lookup(k); ok != tt.alive {
				t.Fatalf("alive = %v, want %v", ok, tt.alive)
			}
			if !tt.alive {
				checkCounts(t, bs, vip, 0)
				if rec.ended[k] != ReasonExpired || tb.Stats().Expired != 1 {
					t.Errorf("end reason %v, expired %d", rec.ended[k], tb.Stats().Expired)
				}
			}
		})
	}
}

// TestSweepBoundedWork checks that a sweep scans at most SweepBatch slots
// per shard, that successive sweeps resume and cover every entry, and that
// a sweep never scans a slot twice.
func TestSweepBoundedWork(t *testing.T) {
	const shards, batch, n = 4, 10, 400
	clk := newFakeClock()
	tb := mustNew(t, Options{Shards: shards, SweepBatch: batch, UDPIdle: time.Second, Now: clk.Now})
	bs, vip := newBackends(1)
	for i := 0; i < n; i++ {
		insertPicked(t, tb, flowKey(i, l4.UDP), bs[0], nil)
	}
	maxUsed := 0
	for i := range tb.shards {
		maxUsed = max(maxUsed, int(tb.shards[i].used))
	}
	clk.Advance(time.Minute)
	sweeps, total := 0, 0
	for tb.Len() > 0 {
		scanned, expired := tb.Sweep()
		if scanned > shards*batch || expired > scanned {
			t.Fatalf("sweep %d scanned %d, expired %d; bound %d", sweeps, scanned, expired, shards*batch)
		}
		total += expired
		if sweeps++; sweeps > (maxUsed+batch-1)/batch {
			t.Fatalf("%d entries left after %d sweeps: the sweeper does not resume", tb.Len(), sweeps)
		}
	}
	if total != n {
		t.Errorf("expired %d, want %d", total, n)
	}
	checkCounts(t, bs, vip, 0)

	insertPicked(t, tb, flowKey(1, l4.UDP), bs[0], nil) // one live slot of a large slab
	if scanned, _ := tb.Sweep(); scanned > shards*batch {
		t.Errorf("scanned %d", scanned)
	}
}

func TestClockNeverMovesBack(t *testing.T) {
	clk := newFakeClock()
	tb := mustNew(t, Options{UDPIdle: 10 * time.Second, Now: clk.Now})
	bs, _ := newBackends(1)
	clk.Advance(time.Hour)
	tb.Sweep()
	insertPicked(t, tb, flowKey(1, l4.UDP), bs[0], nil)
	clk.Advance(-2 * time.Hour) // the wall clock steps back
	tb.Sweep()
	clk.Advance(2*time.Hour + 5*time.Second)
	tb.Sweep()
	if _, ok := tb.Lookup(flowKey(1, l4.UDP)); !ok {
		t.Error("flow idle 5s expired after the clock stepped back")
	}
}

// TestClockWraps runs a 1ms clock past 2^32 ticks (49.7 days): expiry
// must keep working across the wrap.
func TestClockWraps(t *testing.T) {
	clk := newFakeClock()
	tb := mustNew(t, Options{Tick: time.Millisecond, UDPIdle: 30 * time.Second, Now: clk.Now})
	bs, vip := newBackends(1)
	clk.Advance(time.Duration(1<<32-1000) * time.Millisecond)
	tb.Sweep()
	insertPicked(t, tb, flowKey(1, l4.UDP), bs[0], nil)
	clk.Advance(20 * time.Second) // the clock wraps here
	tb.Sweep()
	if tb.Len() != 1 {
		t.Fatal("flow idle 20s expired at the wrap")
	}
	clk.Advance(11 * time.Second)
	tb.Sweep()
	if tb.Len() != 0 {
		t.Fatal("flow idle 31s survived the wrap")
	}
	checkCounts(t, bs, vip, 0)
}

// TestStartExpiresAndCloseStops runs the real ticker and checks that Close
// leaves no goroutine (TestMain's goleak check) and releases every count.
func TestStartExpiresAndCloseStops(t *testing.T) {
	tb := mustNew(t, Options{Tick: 5 * time.Millisecond, UDPIdle: 10 * time.Millisecond})
	if err := tb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tb.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start = %v, want ErrStarted", err)
	}
	bs, vip := newBackends(1)
	insertPicked(t, tb, flowKey(1, l4.UDP), bs[0], nil)
	insertPicked(t, tb, flowKey(2, l4.TCP), bs[0], nil)
	deadline := time.Now().Add(5 * time.Second)
	for tb.Len() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not expire the UDP flow")
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.Close()
	tb.Close()
	checkCounts(t, bs, vip, 0)
	if err := tb.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
}

func TestContextStopsSweeper(t *testing.T) {
	tb := mustNew(t, Options{Tick: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	if err := tb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-tb.done // the goroutine returns without Close
}

// SetIdle applies to entries that exist already, from the next sweep.
func TestSetIdleAppliesToExistingEntries(t *testing.T) {
	clk := newFakeClock()
	tb := mustNew(t, Options{UDPIdle: time.Minute, TCPIdle: time.Hour, Now: clk.Now})
	bs, _ := newBackends(1)
	udp, tcp := flowKey(1, l4.UDP), flowKey(2, l4.TCP)
	insertPicked(t, tb, udp, bs[0], nil)
	insertPicked(t, tb, tcp, bs[0], nil)
	clk.Advance(10 * time.Second)
	tb.Sweep()
	if _, ok := tb.Lookup(udp); !ok {
		t.Fatal("udp entry expired before its minute")
	}
	if err := tb.SetIdle(0, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(6 * time.Second)
	tb.Sweep()
	if _, ok := tb.Lookup(udp); ok {
		t.Fatal("udp entry outlived the new 5s timeout")
	}
	if _, ok := tb.Lookup(tcp); !ok {
		t.Fatal("SetIdle(0, ...) changed the tcp timeout")
	}
	if err := tb.SetIdle(-time.Second, 0); err == nil {
		t.Fatal("negative timeout accepted")
	}
}
