// End-to-end tests of the l4lb binary in network namespaces: reload and
// shutdown as an operator drives them, with real signals.

package main

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// vipA: VIP a on port 80, round robin over be0 and be1.
var vipA = newConf(`drain_timeout = "3s"`).vip("a", ":80", `protocol = "tcp"`).backends(2, 7000).String()

// Reload: backend 2 added, backend 0 removed, VIP b added, then removed;
// the established connection and a stream of new ones never notice.
var vipAReloaded = newConf(`drain_timeout = "3s"`).
	vip("a", ":80", `protocol = "tcp"`).named("be1", 1, 7000).named("be2", 2, 7000).
	vip("b", ":81", `protocol = "tcp"`).named("be2", 2, 7000).String()

func TestReloadKeepsServing(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	lb := startLB(t, tp, vipA)

	established := mustDialVIP(t, tp, 80)
	if err := established.echo("before"); err != nil {
		t.Fatal(err)
	}
	if seen := backendsSeen(t, tp, 80, 6); seen["be0"] == 0 || seen["be1"] == 0 || seen["be2"] != 0 {
		t.Fatalf("before reload: %v", seen)
	}

	// A client dialling all through the reloads must never be refused. It
	// pauses (sampling held) while the test samples round robin's spread,
	// which its own picks would otherwise interleave with.
	stop := make(chan struct{})
	var dials, failures atomic.Int64
	var wg sync.WaitGroup
	var sampling sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			sampling.Lock()
			c, err := dialVIP(tp, 80)
			sampling.Unlock()
			dials.Add(1)
			if err != nil {
				failures.Add(1)
				t.Errorf("dial during reload: %v", err)
				continue
			}
			c.Close()
		}
	}()
	var stopOnce sync.Once
	stopDialer := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(stopDialer) // also when the test fails early: before l4lb stops
	sample := func(port, n int) map[string]int {
		t.Helper()
		sampling.Lock()
		defer sampling.Unlock()
		return backendsSeen(t, tp, port, n)
	}

	lb.writeConfig(t, vipAReloaded)
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	if err := established.echo("after add/remove"); err != nil {
		t.Fatalf("established connection broken by reload: %v", err)
	}
	if seen := sample(80, 6); seen["be0"] != 0 || seen["be1"] == 0 || seen["be2"] == 0 {
		t.Fatalf("after reload: %v", seen)
	}
	if seen := backendsSeen(t, tp, 81, 2); seen["be2"] != 2 {
		t.Fatalf("new VIP b: %v", seen)
	}

	// A bad file is refused and the running config keeps serving.
	lb.writeConfig(t, "[[vip]]\nname = \"broken\"\nlisten = \"nonsense\"\n")
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload refused")
	if err := established.echo("after bad reload"); err != nil {
		t.Fatal(err)
	}
	if seen := backendsSeen(t, tp, 81, 1); seen["be2"] != 1 {
		t.Fatalf("VIP b after bad reload: %v", seen)
	}

	// Removing VIP b stops it accepting; VIP a is untouched.
	lb.writeConfig(t, vipA)
	lb.signal(t, syscall.SIGHUP)
	lb.waitLogN(t, "reload applied", 2)
	if _, err := dialVIP(tp, 81); err == nil {
		t.Fatal("removed VIP b still accepts")
	}
	if err := established.echo("after VIP removal"); err != nil {
		t.Fatal(err)
	}
	stopDialer()
	if dials.Load() < 10 || failures.Load() != 0 {
		t.Fatalf("%d dials during reloads, %d failed", dials.Load(), failures.Load())
	}
	if out := lb.statusText(t); !strings.Contains(out, "VIP a") {
		t.Fatalf("status:\n%s", out)
	}
}

// TestSIGTERMDrains: an open connection keeps working after SIGTERM until it
// closes; the process then exits 0 without waiting for the full timeout.
func TestSIGTERMDrains(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startLB(t, tp, vipA)
	c := mustDialVIP(t, tp, 80)
	lb.signal(t, syscall.SIGTERM)
	lb.waitLog(t, "shutting down")
	time.Sleep(300 * time.Millisecond)
	if err := c.echo("during drain"); err != nil {
		t.Fatalf("connection broken during drain: %v", err)
	}
	if _, err := dialVIP(tp, 80); err == nil {
		t.Fatal("new connection accepted while draining")
	}
	c.Close()
	select {
	case <-lb.exited:
		if lb.err != nil {
			t.Fatalf("l4lb exited with %v", lb.err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("l4lb still running after its last connection closed")
	}
}

// TestSIGTERMResetsAfterDrainTimeout: a connection still open at the drain
// timeout is reset, and the process exits 0.
func TestSIGTERMResetsAfterDrainTimeout(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	namedEcho(t, tp, 0, 7000)
	lb := startLB(t, tp, strings.Replace(vipA, `drain_timeout = "3s"`, `drain_timeout = "1s"`, 1))
	c := mustDialVIP(t, tp, 80)
	start := time.Now()
	lb.signal(t, syscall.SIGTERM)
	select {
	case <-lb.exited:
		if lb.err != nil {
			t.Fatalf("l4lb exited with %v", lb.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("l4lb did not exit after the drain timeout")
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("exited after %v, before the 1s drain timeout", d)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.r.ReadByte(); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection after shutdown: %v, want a reset (ECONNRESET)", err)
	}
}

// TestSecondSignalCutsDrain: a second SIGTERM (or SIGINT) during a long
// drain resets the connections still open at once (the client reads
// ECONNRESET, not an orderly EOF) and the process exits 0 promptly.
func TestSecondSignalCutsDrain(t *testing.T) {
	for _, second := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(second.String(), func(t *testing.T) {
			tp := testutil.NewTopology(t, 1)
			namedEcho(t, tp, 0, 7000)
			lb := startLB(t, tp, strings.Replace(vipA, `drain_timeout = "3s"`, `drain_timeout = "60s"`, 1))
			c := mustDialVIP(t, tp, 80)
			lb.signal(t, syscall.SIGTERM)
			lb.waitLog(t, "shutting down")
			if err := c.echo("during drain"); err != nil {
				t.Fatalf("connection broken by the first signal: %v", err)
			}
			start := time.Now()
			lb.signal(t, second)
			select {
			case <-lb.exited:
				if lb.err != nil {
					t.Fatalf("l4lb exited with %v", lb.err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("l4lb still draining 5s after the second signal (drain_timeout 60s)")
			}
			t.Logf("exited %v after the second signal", time.Since(start))
			if !strings.Contains(lb.log.String(), "second signal") {
				t.Error("the second signal was not logged")
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.r.ReadByte(); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("client read after the second signal: %v, want ECONNRESET", err)
			}
		})
	}
}
