// End-to-end tests of stall_timeout with real PostgreSQL servers: a hung
// server (SIGSTOP) that TCP checks still pass is degraded and avoided,
// and comes back on SIGCONT; one long query next to progressing sessions
// degrades nothing.

package main

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// stallConf is a round_robin VIP on 198.18.2.10:5432 over the servers a
// and b with tcp checks (which a stopped server passes) and stall_timeout.
// round_robin, not least_conn: least_conn would steer new connections
// away from the sessions piling up on a hung server by itself.
func stallConf(a, b netip.AddrPort, stall string) string {
	return newConf().vip("pg", ":5432", `algorithm = "round_robin"`, `connect_timeout = "500ms"`, `stall_timeout = "`+stall+`"`).
		health(`type = "tcp"`, `interval = "500ms"`, `timeout = "500ms"`, `rise = 1`, `fall = 2`).at("pg0", a).at("pg1", b).String()
}

// pgbenchWithin is pgbenchVIP bounded by d: a client that hangs on a
// stopped server fails the test instead of holding it.
func pgbenchWithin(t *testing.T, tp *testutil.Topology, d time.Duration, args ...string) pgbenchResult {
	t.Helper()
	argv := append([]string{"timeout", strconv.Itoa(int(d / time.Second)), "pgbench", "-n", "-h", tp.VIP.String(), "-p", "5432", "-U", "postgres"}, args...)
	out, _ := tp.Client.Command(append(argv, "postgres")...).CombinedOutput()
	if !pgbenchProcessed.Match(out) {
		t.Fatalf("pgbench %v did not finish within %v (a client hung on the stopped server?):\n%s", args, d, out)
	}
	return parsePgbench(t, string(out))
}

// newFlows runs pgbench -C (a new connection per transaction) for 2 x 25
// transactions and returns the connections each server got.
func newFlows(t *testing.T, lb *lbProcess, tp *testutil.Topology) (pg0, pg1 uint64) {
	t.Helper()
	before := lb.status(t)
	r := pgbenchWithin(t, tp, 30*time.Second, "-S", "-C", "-c", "2", "-t", "25")
	after := lb.status(t)
	if r.processed != 50 || r.failed != 0 || r.aborted != 0 {
		t.Fatalf("pgbench -C: %d processed, %d failed, %d aborted:\n%s", r.processed, r.failed, r.aborted, r.out)
	}
	d := func(id string) uint64 { return backendOf(after, "pg", id).Flows - backendOf(before, "pg", id).Flows }
	return d("pg0"), d("pg1")
}

// TestPgbenchHungServer: pg0's postmaster and backends are stopped
// (SIGSTOP) under pgbench -C. Its kernel still completes handshakes and
// acknowledges requests, so its tcp checks pass and it stays up; but the
// requests sent to it get no byte back, so within stall_timeout and one
// look it is degraded, and new connections all go to pg1. SIGCONT: the
// waiting sessions get their replies, it is back, new connections reach
// it again, and the load lost nothing.
func TestPgbenchHungServer(t *testing.T) {
	const stall = 2 * time.Second
	tp := testutil.NewTopology(t, 2)
	pg := startPgPair(t, tp)
	lb := startLB(t, tp, stallConf(pg[0].Addr, pg[1].Addr, stall.String()))
	lb.waitHealth(t, "pg", "pg0", "up")
	lb.waitHealth(t, "pg", "pg1", "up")

	load := startPgbenchVIP(t, tp, "-S", "-C", "-c", "4", "-T", "12", "-R", "100")
	lb.waitStatus(t, 5*time.Second, "the load on both servers", func(st plane.Status) bool {
		return backendOf(st, "pg", "pg0").Flows > 0 && backendOf(st, "pg", "pg1").Flows > 0
	})
	pg[0].Pause(t)
	paused := time.Now()
	lb.waitStatus(t, 10*time.Second, "pg0 degraded", func(st plane.Status) bool {
		return backendOf(st, "pg", "pg0").Degraded != ""
	})
	took := time.Since(paused)
	st := lb.status(t)
	b0 := backendOf(st, "pg", "pg0")
	if !strings.Contains(b0.Degraded, "no reply for") || b0.Health != "up" || b0.EffectiveWeight != 0 {
		t.Errorf("pg0 degraded %q, health %s (tcp checks pass a stopped server), effective weight %d", b0.Degraded, b0.Health, b0.EffectiveWeight)
	}
	if n := mustVIP(t, st, "pg").TCP.StallDegraded; n != 1 {
		t.Errorf("stall_degraded %d, want 1", n)
	}
	// stall_timeout, one look (1s), and the status poll; the rest is slack
	// for a busy machine.
	if bound := stall + time.Second + 2*time.Second; took > bound {
		t.Errorf("pg0 degraded %v after it stopped; bound %v", took, bound)
	}
	if text := lb.statusText(t); !strings.Contains(text, "up/DEGRADED") {
		t.Errorf("text status does not show pg0 degraded:\n%s", text)
	}

	n0, n1 := newFlows(t, lb, tp)
	if n0 != 0 || n1 < 50 {
		t.Errorf("while pg0 is degraded: new connections pg0 %d, pg1 %d; want all on pg1", n0, n1)
	}

	pg[0].Resume(t)
	resumed := time.Now()
	lb.waitStatus(t, 10*time.Second, "pg0 back", func(st plane.Status) bool {
		return backendOf(st, "pg", "pg0").Degraded == ""
	})
	back := time.Since(resumed)
	m0, m1 := newFlows(t, lb, tp)
	if m0 == 0 || m1 == 0 {
		t.Errorf("after SIGCONT: new connections pg0 %d, pg1 %d; want both", m0, m1)
	}
	r := load()
	if r.failed != 0 || r.aborted != 0 || r.processed == 0 {
		t.Errorf("load: %d processed, %d failed, %d aborted; want none lost:\n%s", r.processed, r.failed, r.aborted, r.out)
	}
	t.Logf("pg0 stopped: degraded after %v (%s), 0 of %d new connections on it; resumed: back after %v, then %d/%d new connections; load %d transactions, none lost",
		took.Round(time.Millisecond), b0.Degraded, n0+n1, back.Round(time.Millisecond), m0, m1, r.processed)
}

// TestPgLongQueryNotDegraded: one query that runs four times
// stall_timeout (pg_sleep) on a server whose other sessions progress
// (pgbench) is a long request on a live server, not a hung one: neither
// server is ever degraded.
func TestPgLongQueryNotDegraded(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	pg := startPgPair(t, tp)
	lb := startLB(t, tp, stallConf(pg[0].Addr, pg[1].Addr, "1s"))
	lb.waitHealth(t, "pg", "pg0", "up")
	lb.waitHealth(t, "pg", "pg1", "up")

	// Sessions held for the whole run: round_robin puts two on each.
	load := startPgbenchVIP(t, tp, "-S", "-c", "4", "-T", "7", "-R", "200")
	testutil.Eventually(t, 5*time.Second, "pgbench's sessions on both servers", func() bool {
		return pg[0].QueryInt(t, pgbenchSessions) == 2 && pg[1].QueryInt(t, pgbenchSessions) == 2
	})
	sleeper := tp.Client.Command("psql", "-h", tp.VIP.String(), "-p", "5432", "-U", "postgres", "-X", "-q", "-c", "SELECT pg_sleep(4)", "postgres")
	var out syncBuffer
	sleeper.Stdout, sleeper.Stderr = &out, &out
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	t.Cleanup(func() { _ = sleeper.Process.Kill() })
	const sleeping = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'"
	testutil.Eventually(t, 5*time.Second, "the long query running", func() bool {
		return pg[0].QueryInt(t, sleeping)+pg[1].QueryInt(t, sleeping) == 1
	})
	looks := 0
	for waiting := true; waiting; looks++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("psql pg_sleep: %v: %s", err, out.String())
			}
			waiting = false
		case <-time.After(200 * time.Millisecond):
		}
		for _, b := range lb.vip(t, "pg").Backends {
			if b.Degraded != "" {
				t.Fatalf("%s degraded by one long query next to progressing sessions: %s", b.ID, b.Degraded)
			}
		}
	}
	r := load()
	if r.failed != 0 || r.aborted != 0 || r.processed == 0 {
		t.Errorf("pgbench: %d processed, %d failed, %d aborted:\n%s", r.processed, r.failed, r.aborted, r.out)
	}
	if n := lb.vip(t, "pg").TCP.StallDegraded; n != 0 {
		t.Errorf("stall_degraded %d, want 0", n)
	}
	t.Logf("pg_sleep(4) with stall_timeout 1s next to %d pgbench transactions: no backend degraded in %d looks at status", r.processed, looks)
}
