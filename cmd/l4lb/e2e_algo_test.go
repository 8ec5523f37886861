// Every balancing algorithm through the daemon: one l4lb with one VIP per
// algorithm in front of the same three backends, each VIP checked for the
// property that sets its algorithm apart (affinity for the hashes, even
// load for least_conn and p2c, a share for everyone for random, bounded
// loads for a hash with hash_balance_factor).

package main

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// algoPorts gives each algorithm its VIP port on 198.18.2.10.
var algoPorts = []struct {
	algo string
	port int
}{{"maglev", 80}, {"source_hash", 81}, {"least_conn", 82}, {"p2c", 83}, {"random", 84}}

func algoConfig() string {
	c := newConf(`drain_timeout = "1s"`)
	for _, a := range algoPorts {
		c.vip(a.algo, fmt.Sprintf(":%d", a.port), fmt.Sprintf("algorithm = %q", a.algo)).health(`type = "none"`).backends(3, 7000)
	}
	// Maglev with bounded loads: a hot client spreads once its backend
	// holds 1.25 x its share.
	c.vip("bounded", fmt.Sprintf(":%d", boundedPort), `algorithm = "maglev"`, `hash_balance_factor = 125`).health(`type = "none"`).backends(3, 7000)
	return c.String()
}

// boundedPort is the port of the VIP with hash_balance_factor.
const boundedPort = 85

// clientAddrs adds n more addresses (198.18.0.3 on) to the client
// namespace's link, so that connections can come from several clients.
func clientAddrs(t *testing.T, tp *testutil.Topology, n int) []netip.Addr {
	t.Helper()
	var lines []string
	var addrs []netip.Addr
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, 0, byte(3 + i)})
		addrs = append(addrs, a)
		lines = append(lines, fmt.Sprintf("addr add %s/24 dev c0", a))
	}
	cmd := exec.Command("ip", "-n", tp.Client.Name, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -batch: %v: %s", err, out)
	}
	return addrs
}

// holdConn opens a connection through port, keeps it open until the test
// ends and counts it on its backend.
func holdConn(t *testing.T, tp *testutil.Topology, port int, held map[string]int) *clientConn {
	t.Helper()
	c := mustDialVIP(t, tp, port)
	c.SetDeadline(time.Time{})
	held[c.backend]++
	return c
}

func TestAlgorithmsThroughDaemon(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	clients := clientAddrs(t, tp, 16)
	lb := startLB(t, tp, algoConfig())

	// The hashes: a client address keeps its backend over many connections
	// from different source ports, and different addresses spread.
	for _, algo := range []struct {
		name string
		port int
	}{{"maglev", 80}, {"source_hash", 81}} {
		t.Run(algo.name, func(t *testing.T) {
			perBackend := map[string]int{}
			for _, src := range clients {
				first := ""
				for k := range 6 {
					c, err := dialVIPFrom(tp, src, algo.port, 5*time.Second)
					if err != nil {
						t.Fatalf("%s dial %d: %v", src, k, err)
					}
					c.Close()
					if first == "" {
						first = c.backend
						perBackend[first]++
					} else if c.backend != first {
						t.Fatalf("client %s: connection %d went to %s, the first to %s", src, k, c.backend, first)
					}
				}
			}
			// 16 addresses over 3 equal backends: every backend gets some
			// (all on two of three has a chance of about 3 x (2/3)^16, 0.5%,
			// but the hash is fixed, so it either always passes or never).
			if len(perBackend) != 3 {
				t.Fatalf("16 client addresses reached only %v", perBackend)
			}
			t.Logf("clients per backend: %v", perBackend)
		})
	}

	// Bounded loads (hash_balance_factor = 125): one hot client address,
	// whose every connection hashes to the same backend, holds 12
	// connections; after each, no backend holds more than the ceiling
	// ceil(1.25 x n / 3) of the n held, and the client's own backend, which
	// its key prefers, holds the most.
	t.Run("maglev_bounded", func(t *testing.T) {
		hot := clients[0]
		held := map[string]int{}
		home := ""
		for n := 1; n <= 12; n++ {
			c, err := dialVIPFrom(tp, hot, boundedPort, 5*time.Second)
			if err != nil {
				t.Fatalf("connection %d: %v", n, err)
			}
			t.Cleanup(func() { c.Close() })
			c.SetDeadline(time.Time{})
			held[c.backend]++
			if home == "" {
				home = c.backend
			}
			ceiling := (125*n + 299) / 300
			for b, k := range held {
				if k > ceiling {
					t.Fatalf("after %d connections from %s: %s holds %d, over the ceiling %d (%v)", n, hot, b, k, ceiling, held)
				}
			}
		}
		for b, k := range held {
			if k > held[home] {
				t.Fatalf("%s holds %d, more than the client's own backend %s (%v)", b, k, home, held)
			}
		}
		if len(held) != 3 {
			t.Fatalf("12 connections of a hot client reached %v, want all three backends", held)
		}
		live := lb.liveFlows(t, "bounded")
		for b, k := range held {
			if live[b] != int64(k) {
				t.Fatalf("status live flows %v, the client holds %v", live, held)
			}
		}
		t.Logf("held: %v (home %s)", held, home)
	})

	// least_conn: every pick goes to a backend with the fewest live
	// connections, also after one backend's connections all end.
	t.Run("least_conn", func(t *testing.T) {
		held := map[string]int{}
		var conns []*clientConn
		pick := func() {
			t.Helper()
			least := min(held["be0"], held["be1"], held["be2"])
			c := holdConn(t, tp, 82, held)
			if held[c.backend]-1 != least {
				t.Fatalf("new connection went to %s with %d live; fewest was %d (%v before)", c.backend, held[c.backend]-1, least, held)
			}
			conns = append(conns, c)
		}
		for range 12 {
			pick()
		}
		for _, c := range conns {
			if c.backend == "be1" {
				c.Close()
			}
		}
		held["be1"] = 0
		testutil.Eventually(t, 5*time.Second, "be1's connections to end", func() bool { return lb.liveFlows(t, "least_conn")["be1"] == 0 })
		for range 4 {
			pick()
		}
		if held["be0"] != 4 || held["be1"] != 4 || held["be2"] != 4 {
			t.Fatalf("held %v, want 4 on each", held)
		}
	})

	// p2c compares two distinct members: one that holds strictly more live
	// connections than both others is never picked (random picks it a
	// third of the time), and the load stays close.
	t.Run("p2c", func(t *testing.T) {
		held := map[string]int{}
		for range 30 {
			before := map[string]int{"be0": held["be0"], "be1": held["be1"], "be2": held["be2"]}
			c := holdConn(t, tp, 83, held)
			n := before[c.backend]
			above := true
			for b, m := range before {
				if b != c.backend && m >= n {
					above = false
				}
			}
			if above {
				t.Fatalf("p2c picked %s, the most loaded of %v", c.backend, before)
			}
		}
		t.Logf("held: %v", held)
	})

	// p2c with short connections (all counts back to 0 between picks) and
	// random: every backend gets a fair share of 60 connections (20
	// expected; below 8 has a chance of about 1e-4).
	for _, algo := range []struct {
		name string
		port int
	}{{"p2c", 83}, {"random", 84}} {
		t.Run(algo.name+"_share", func(t *testing.T) {
			testutil.Eventually(t, 5*time.Second, "earlier connections to end", func() bool {
				for _, n := range lb.liveFlows(t, algo.name) {
					if n != 0 {
						return false
					}
				}
				return true
			})
			seen := backendsSeen(t, tp, algo.port, 60)
			for i := range 3 {
				if n := seen[fmt.Sprintf("be%d", i)]; n < 8 {
					t.Fatalf("be%d got %d of 60 connections: %v", i, n, seen)
				}
			}
			t.Logf("60 connections: %v", seen)
		})
	}
}

// leastConn is VIP lc, least_conn over the first n backends.
func leastConn(n int) string {
	return newConf(`drain_timeout = "1s"`).vip("lc", ":80", `algorithm = "least_conn"`).health(`type = "none"`).backends(n, 7000).String()
}

// TestLiveCountsSurviveReload: connections open across a reload (SIGHUP)
// that adds a backend are still counted per backend in status, and
// least_conn still sees them: the next two connections go to the new,
// empty backend, not to whichever backend ties first on a zeroed count.
func TestLiveCountsSurviveReload(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	lb := startLB(t, tp, leastConn(2))
	held := map[string]int{}
	for range 4 {
		holdConn(t, tp, 80, held)
	}
	if held["be0"] != 2 || held["be1"] != 2 {
		t.Fatalf("least_conn spread 4 connections as %v", held)
	}
	lb.writeConfig(t, leastConn(3))
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	if live := lb.liveFlows(t, "lc"); live["be0"] != 2 || live["be1"] != 2 || live["be2"] != 0 {
		t.Fatalf("live flows after the reload: %v, want be0 2, be1 2, be2 0", live)
	}
	st := lb.status(t)
	if st.VIPs[0].Active != 4 {
		t.Fatalf("VIP active after the reload: %d, want 4", st.VIPs[0].Active)
	}
	for k := range 2 {
		if c := holdConn(t, tp, 80, held); c.backend != "be2" {
			t.Fatalf("connection %d after the reload went to %s (held before it: %v)", k, c.backend, held)
		}
	}
	if live := lb.liveFlows(t, "lc"); live["be0"] != 2 || live["be1"] != 2 || live["be2"] != 2 {
		t.Fatalf("live flows: %v, want 2 each", live)
	}
}
