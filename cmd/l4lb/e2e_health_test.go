package main

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

var blackholeVIP = newConf(`log_format = "json"`).
	vip("a", ":80", `protocol = "tcp"`, `connect_timeout = "300ms"`, `retries = 2`, `log_connections = true`, `log_connections_rate = 0`).
	health(`type = "tcp"`, `interval = "300ms"`, `timeout = "200ms"`, `fall = 2`, `max_fails = 0`).backends(3, 7000).String()

// TestBlackholedBackend: a backend whose host silently drops everything
// (a blackhole route inside its namespace) is taken down by probe
// timeouts; meanwhile clients that hit it wait one connect_timeout and
// then reach another backend, and no client that started after the
// blackhole fails. (One already proxied to it when its host went dark may
// hang: its bytes are in flight, nothing can be replayed.)
//
// What each client waited is read from l4lb's own connection log (its
// retries and connect time, on the event loop's clock), not from the
// client's stopwatch, which on a busy machine also counts the test's own
// goroutines waiting for a CPU. How soon the backend is marked down is
// counted in probes by the in-process TestBackendDownAndBack; here the
// wait for it is only bounded.
func TestBlackholedBackend(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	lb := startLB(t, tp, blackholeVIP)
	lb.waitStatus(t, 5*time.Second, "all backends up", func(st plane.Status) bool {
		for _, b := range st.VIPs[0].Backends {
			if b.Health != "up" {
				return false
			}
		}
		return true
	})
	var (
		mu         sync.Mutex
		latencies  []time.Duration
		failures   []error
		stop       = make(chan struct{})
		wg         sync.WaitGroup
		blackholed time.Time // a connection already on be2 then may hang: excused
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				c, err := dialVIPWithin(tp, 80, 2*time.Second)
				mu.Lock()
				if err != nil {
					if blackholed.IsZero() || start.Before(blackholed) {
						mu.Unlock()
						continue
					}
					failures = append(failures, err)
				} else {
					latencies = append(latencies, time.Since(start))
					c.Close()
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	tp.Backends[2].MustExec(t, "ip", "route", "add", "blackhole", "198.18.1.1/32")
	mu.Lock()
	blackholed = time.Now() // the route is in effect: later clients cannot reach be2
	mu.Unlock()
	lb.waitStatus(t, 10*time.Second, "be2 down", func(st plane.Status) bool {
		return st.VIPs[0].Backends[2].Health == "down"
	})
	took := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	if len(failures) > 0 {
		t.Fatalf("%d of %d clients failed, first: %v", len(failures), len(failures)+len(latencies), failures[0])
	}
	// Every connection has ended and been logged, but those that reached
	// be2 before its host went dark: they wait for be2's FIN.
	lb.waitStatus(t, 10*time.Second, "every connection not stuck on be2 to end (and be logged)", func(st plane.Status) bool {
		return st.VIPs[0].Active == st.VIPs[0].Backends[2].LiveFlows
	})
	retried := checkRetries(t, lb.log.String(), 300*time.Millisecond)
	if fails := lb.status(t).VIPs[0].Backends[2].ConnectFails; fails != uint64(retried) {
		t.Errorf("be2 counts %d failed connects, the connection log %d retried connections", fails, retried)
	}
	// The median client is not held up: a connect waiting for its
	// timeout holds no other connection back. A median, measured at 3-5
	// ms with both cores busy, is not moved by the few slow ones.
	slices.Sort(latencies)
	p50 := latencies[len(latencies)/2]
	if p50 > 100*time.Millisecond {
		t.Fatalf("client connect+first byte: p50 %v (connect_timeout 300ms)", p50)
	}
	t.Logf("%d clients (%d retried after be2's connect timeout), p50 %v, worst %v, down after %v",
		len(latencies), retried, p50, latencies[len(latencies)-1], took)
}

// checkRetries reads the connection lines of the daemon's JSON log: no
// connection waited for more than one connect timeout (retries <= 1), and
// each retried one waited the configured timeout, not a default (its
// connect time is at least timeout and well under the 2s default), and
// then reached a backend other than the blackholed be2. It returns how
// many were retried.
func checkRetries(t *testing.T, log string, timeout time.Duration) int {
	t.Helper()
	retried, lines := 0, 0
	for _, line := range strings.Split(log, "\n") {
		var m struct {
			Msg         string  `json:"msg"`
			Backend     string  `json:"backend"`
			Retries     float64 `json:"retries"`
			ConnectTime string  `json:"connect_time"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Msg != "connection" {
			continue
		}
		lines++
		if m.Retries == 0 {
			continue
		}
		retried++
		d, err := time.ParseDuration(m.ConnectTime)
		switch {
		case m.Retries > 1:
			t.Errorf("a connection waited for %v connect timeouts: %s", m.Retries, line)
		case m.Backend == "be2" || err != nil:
			t.Errorf("a retried connection did not reach another backend: %s", line)
		case d < timeout || d >= time.Second:
			t.Errorf("a retried connection's connect took %v, want one connect_timeout (%v) and a connect: %s", d, timeout, line)
		}
	}
	if lines == 0 {
		t.Fatal("no connection lines in the log")
	}
	return retried
}
