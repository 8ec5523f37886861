package main

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/reconcile"
)

const blackholeVIP = `
[global]
admin_socket = "@ADMIN@"

[[vip]]
name = "a"
listen = "198.18.2.10:80"
protocol = "tcp"
connect_timeout = "300ms"
retries = 2
  [vip.health]
  type = "tcp"
  interval = "300ms"
  timeout = "200ms"
  fall = 2
  max_fails = 0
  [[vip.backend]]
  name = "be0"
  address = "198.18.1.11:7000"
  [[vip.backend]]
  name = "be1"
  address = "198.18.1.12:7000"
  [[vip.backend]]
  name = "be2"
  address = "198.18.1.13:7000"
`

// TestBlackholedBackend: a backend whose host silently drops everything
// (a blackhole route inside its namespace) is taken down by probe
// timeouts; meanwhile clients that hit it wait at most connect_timeout and
// then reach another backend, and no client that started after the
// blackhole fails. (One already proxied to it when its host went dark may
// hang: its bytes are in flight, nothing can be replayed.)
func TestBlackholedBackend(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	for i := range 3 {
		namedEcho(t, tp, i, 7000)
	}
	lb := startLB(t, tp, blackholeVIP)
	waitStatus(t, lb, 5*time.Second, "all backends up", func(st reconcile.Status) bool {
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
	waitStatus(t, lb, 5*time.Second, "be2 down", func(st reconcile.Status) bool {
		return st.VIPs[0].Backends[2].Health == "down"
	})
	took := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	if bound := 2*300*time.Millisecond + 200*time.Millisecond; took > bound+400*time.Millisecond {
		t.Errorf("blackholed backend down after %v; bound fall x interval + timeout = %v", took, bound)
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d clients failed, first: %v", len(failures), len(failures)+len(latencies), failures[0])
	}
	slices.Sort(latencies)
	p50, worst := latencies[len(latencies)/2], latencies[len(latencies)-1]
	if p50 > 100*time.Millisecond || worst > 300*time.Millisecond+500*time.Millisecond {
		t.Fatalf("client connect+first byte: p50 %v, worst %v (connect_timeout 300ms)", p50, worst)
	}
	t.Logf("%d clients, p50 %v, worst %v, down after %v", len(latencies), p50, worst, took)
}
