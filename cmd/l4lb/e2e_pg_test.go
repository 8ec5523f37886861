// End-to-end tests with PostgreSQL's own client, pgbench, through a VIP in
// front of real servers: spreading, a server lost mid-run, role = "primary"
// across a promotion.

package main

import (
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// pgConf is a VIP on 198.18.2.10:5432 over the two servers a and b,
// least_conn; health is the health section's timing (pgHealth) and extra
// lines. A postgres probe logs in: on this 2-core
// machine under pgbench load a login can take a few hundred milliseconds,
// so its timeout is 500ms or more (200ms took a loaded survivor down).
func pgConf(a, b netip.AddrPort, health ...string) string {
	return newConf().vip("pg", ":5432", `protocol = "tcp"`, `algorithm = "least_conn"`, `connect_timeout = "500ms"`, `retries = 2`).
		health(append([]string{`type = "postgres"`, `user = "l4lb"`, `rise = 1`}, health...)...).at("pg0", a).at("pg1", b).String()
}

// pgbenchResult is what the tests read from pgbench's report (PostgreSQL
// 15: "number of transactions actually processed: N", "number of failed
// transactions: N (x%)", and one "client N aborted ..." (a lost
// connection) or "client N script S aborted ..." (an SQL error) per client
// that hit an error other than a serialization failure or deadlock:
// pgbench 15 neither retries nor reconnects such a client, it stops it,
// and counts it in neither figure).
type pgbenchResult struct {
	processed, failed, aborted int
	out                        string
}

var (
	pgbenchProcessed = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	pgbenchFailed    = regexp.MustCompile(`number of failed transactions: (\d+)`)
	pgbenchAborted   = regexp.MustCompile(`client \d+ (?:script \d+ )?aborted`)
)

func parsePgbench(t *testing.T, out string) pgbenchResult {
	t.Helper()
	r := pgbenchResult{out: out, aborted: len(pgbenchAborted.FindAllString(out, -1))}
	m := pgbenchProcessed.FindStringSubmatch(out)
	f := pgbenchFailed.FindStringSubmatch(out)
	if m == nil || f == nil {
		t.Fatalf("pgbench report not understood:\n%s", out)
	}
	r.processed, _ = strconv.Atoi(m[1])
	r.failed, _ = strconv.Atoi(f[1])
	return r
}

// pgbenchVIP runs pgbench from the client namespace against the VIP as
// the postgres user (trusted over TCP by the test servers). A non-zero
// exit is returned in the result's text, not as a failure: pgbench exits
// 2 when a client aborted, which some tests expect.
func pgbenchVIP(t *testing.T, tp *testutil.Topology, args ...string) pgbenchResult {
	t.Helper()
	argv := append([]string{"pgbench", "-n", "-h", tp.VIP.String(), "-p", "5432", "-U", "postgres"}, args...)
	out, _ := tp.Client.Command(append(argv, "postgres")...).CombinedOutput()
	return parsePgbench(t, string(out))
}

// startPgPair starts a PostgreSQL server in backends 0 and 1 of tp, each
// with the pgbench tables at scale 1 and a login role l4lb for probes.
func startPgPair(t *testing.T, tp *testutil.Topology) [2]*testutil.Postgres {
	t.Helper()
	testutil.RequireTool(t, "pgbench")
	var pg [2]*testutil.Postgres
	for i := range pg {
		pg[i] = testutil.StartPostgres(t, testutil.PostgresOptions{Netns: tp.Backends[i],
			Addr: tp.BackendIP(i), User: "l4lb"})
		pgbenchInit(t, pg[i])
	}
	return pg
}

func pgbenchInit(t *testing.T, p *testutil.Postgres) {
	t.Helper()
	args := append([]string{"-i", "-q", "-s", "1"}, p.SocketArgs()...)
	if out, err := p.Command("pgbench", append(args, "postgres")...).CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v: %s", err, out)
	}
}

// TestPgbenchThroughVIP: pgbench's select-only and TPC-B-like scripts,
// one new connection per transaction (-C), through a least_conn VIP over
// two servers: no transaction fails, no client aborts, and both servers
// carry connections.
func TestPgbenchThroughVIP(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	pg := startPgPair(t, tp)
	lb := startLB(t, tp, pgConf(pg[0].Addr, pg[1].Addr, pgHealth...))
	lb.waitHealth(t, "pg", "pg0", "up")
	lb.waitHealth(t, "pg", "pg1", "up")

	// A bounded count per client (-t), not a duration: every one of the
	// 4 x 10 transactions must be processed.
	for _, script := range [][]string{{"-S"}, {"-b", "tpcb-like"}} {
		before := lb.status(t)
		r := pgbenchVIP(t, tp, append(script, "-C", "-c", "4", "-t", "10")...)
		after := lb.status(t)
		if r.failed != 0 || r.aborted != 0 || r.processed != 40 {
			t.Fatalf("pgbench %v: %d processed, %d failed, %d clients aborted:\n%s", script, r.processed, r.failed, r.aborted, r.out)
		}
		flows := [2]uint64{}
		for i, id := range []string{"pg0", "pg1"} {
			flows[i] = backendOf(after, "pg", id).Flows - backendOf(before, "pg", id).Flows
		}
		// least_conn with two equal servers: each gets a share; a lopsided
		// split within 1:4 is normal over a couple of hundred connections.
		if total := flows[0] + flows[1]; flows[0] < total/5 || flows[1] < total/5 {
			t.Fatalf("pgbench %v: connections per server %v", script, flows)
		}
		t.Logf("pgbench %v -C: %d transactions, 0 failed; connections per server %v", script, r.processed, flows)
	}
}

// startPgbenchVIP starts pgbenchVIP in the background; wait returns its result.
func startPgbenchVIP(t *testing.T, tp *testutil.Topology, args ...string) (wait func() pgbenchResult) {
	t.Helper()
	argv := append([]string{"pgbench", "-n", "-h", tp.VIP.String(), "-p", "5432", "-U", "postgres"}, args...)
	cmd := tp.Client.Command(append(argv, "postgres")...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return func() pgbenchResult {
		t.Helper()
		<-done
		return parsePgbench(t, out.String())
	}
}

// pgHealth: probes every 500ms, down after two failures.
var pgHealth = []string{`interval = "500ms"`, `timeout = "500ms"`, `fall = 2`}

const pgbenchSessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'"

// TestPgbenchServerStopped: one of two servers stops (pg_ctl stop -m
// immediate) while pgbench runs through the VIP.
//
// Run A holds 8 sessions (plain mode: one connection per client for the
// whole run), spread over both servers. Stopping pg0 ends the n0 sessions
// it holds, and pgbench 15 stops ("aborts") each of those clients: the
// transaction each was running, or about to send, is lost, and there is
// nothing a Layer-4 balancer could do about it (the bytes went to a
// process that no longer exists). So exactly n0 transactions fail, n0
// being what pg_stat_activity on pg0 counted just before the stop; the
// 8 - n0 clients on pg1 never notice.
//
// Run B starts right after the stop with a new connection per
// transaction. Probes here are slow (interval 1s, fall 2) and passive
// marks off (max_fails = 0), so pg0 stays eligible for up to fall x
// interval + timeout = 3s: every connect l4lb makes to it meanwhile is
// refused, and l4lb tries the next backend (retries) before the client
// has sent a byte. So B loses nothing: zero failed, zero aborted, and
// pg0's refused connects (status connect_fails) show that the retry path
// ran. Then probes take pg0 down within the bound.
//
// Both runs are rate-limited (-R) so that the 2-core machine keeps the
// survivor's probe logins in time.
func TestPgbenchServerStopped(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	pg := startPgPair(t, tp)
	lb := startLB(t, tp, pgConf(pg[0].Addr, pg[1].Addr, `interval = "1s"`, `timeout = "1s"`, `fall = 2`, `max_fails = 0`))
	lb.waitHealth(t, "pg", "pg0", "up")
	lb.waitHealth(t, "pg", "pg1", "up")

	const clients = 8
	waitA := startPgbenchVIP(t, tp, "-S", "-c", strconv.Itoa(clients), "-T", "5", "-R", "400")
	var n0, n1 int64
	testutil.Eventually(t, 5*time.Second, "pgbench's sessions established", func() bool {
		n0, n1 = pg[0].QueryInt(t, pgbenchSessions), pg[1].QueryInt(t, pgbenchSessions)
		return n0+n1 == clients
	})
	time.Sleep(500 * time.Millisecond)
	pg[0].Stop(t)
	stopped := time.Now()
	waitB := startPgbenchVIP(t, tp, "-S", "-C", "-c", "4", "-T", "3", "-R", "100")
	lb.waitStatus(t, 5*time.Second, "pg0 down", func(st plane.Status) bool {
		return backendOf(st, "pg", "pg0").Health == "down"
	})
	took := time.Since(stopped)
	lb.waitStatus(t, 2*time.Second, "pg0's sessions ended", func(st plane.Status) bool {
		return backendOf(st, "pg", "pg0").LiveFlows == 0
	})
	a, b := waitA(), waitB()

	if a.aborted != int(n0) || a.failed != 0 || a.processed == 0 {
		t.Errorf("run A: %d clients aborted, want the %d whose sessions were on pg0; %d failed, %d processed:\n%s",
			a.aborted, n0, a.failed, a.processed, a.out)
	}
	if b.aborted != 0 || b.failed != 0 || b.processed < 20 {
		t.Errorf("run B (after the stop): %d aborted, %d failed, %d processed; want none lost:\n%s",
			b.aborted, b.failed, b.processed, b.out)
	}
	st := lb.status(t)
	retried := backendOf(st, "pg", "pg0").ConnectFails
	if retried == 0 {
		t.Errorf("no connect to the stopped pg0 was refused: the retry path did not run")
	}
	// fall x interval + timeout, plus the first probe's jitter (10%) and
	// the status poll.
	if bound := 2*time.Second + time.Second; took > bound+500*time.Millisecond {
		t.Errorf("pg0 down %v after it stopped; bound %v", took, bound)
	}
	t.Logf("A: %d sessions on pg0, %d on pg1: %d aborted, %d processed; B: %d processed, 0 lost, %d connects to pg0 refused and retried; pg0 down after %v",
		n0, n1, a.aborted, a.processed, b.processed, retried, took)
}

// TestPgbenchPrimaryRole: a role = "primary" VIP in front of a primary
// (pg0) and its streaming replica (pg1, pg_basebackup -R) sends pgbench's
// TPC-B-like writes only to the primary: the replica refuses writes, so
// zero failed transactions proves no write reached it, and the primary's
// pgbench_history holds every one. The primary stops and the replica is
// promoted: health brings it up on its next probe (rise = 1: within
// interval + timeout) and the same writes succeed there.
func TestPgbenchPrimaryRole(t *testing.T) {
	testutil.RequireTool(t, "pgbench", "pg_basebackup")
	tp := testutil.NewTopology(t, 2)
	primary := testutil.StartPostgres(t, testutil.PostgresOptions{Netns: tp.Backends[0],
		Addr: tp.BackendIP(0), User: "l4lb"})
	pgbenchInit(t, primary)
	replica := primary.StartReplicaAt(t, tp.Backends[1], tp.BackendIP(1))
	lb := startLB(t, tp, pgConf(primary.Addr, replica.Addr, `interval = "500ms"`, `timeout = "500ms"`, `fall = 2`, `role = "primary"`, `on_down = "reset"`))
	lb.waitHealth(t, "pg", "pg0", "up")
	lb.waitHealth(t, "pg", "pg1", "down")

	writes := func(want int64, on *testutil.Postgres, id string) {
		t.Helper()
		before := lb.status(t)
		r := pgbenchVIP(t, tp, "-b", "tpcb-like", "-C", "-c", "4", "-t", "10")
		if r.failed != 0 || r.aborted != 0 || r.processed != 40 {
			t.Fatalf("pgbench writes: %d processed, %d failed, %d aborted:\n%s", r.processed, r.failed, r.aborted, r.out)
		}
		after := lb.status(t)
		for _, b := range after.VIPs[0].Backends {
			if d := b.Flows - backendOf(before, "pg", b.ID).Flows; b.ID != id && d != 0 {
				t.Fatalf("%d connections reached %s, not the primary %s", d, b.ID, id)
			}
		}
		if n := on.QueryInt(t, "SELECT count(*) FROM pgbench_history"); n != want {
			t.Fatalf("%s holds %d pgbench_history rows, want %d", id, n, want)
		}
	}
	writes(40, primary, "pg0")

	// Replication is asynchronous (and the test servers commit without
	// waiting for WAL): a planned failover waits for the replica to
	// catch up, or an immediate stop loses the tail.
	testutil.Eventually(t, 5*time.Second, "the replica to replay the writes", func() bool {
		return replica.QueryInt(t, "SELECT count(*) FROM pgbench_history") == 40
	})
	primary.Stop(t)
	replica.Promote(t)
	promoted := time.Now()
	lb.waitHealth(t, "pg", "pg1", "up")
	took := time.Since(promoted)
	lb.waitHealth(t, "pg", "pg0", "down")
	// rise = 1: the next probe after the promotion (interval, +10% jitter)
	// logs in within its timeout; plus the status poll.
	if bound := 500*time.Millisecond*11/10 + 500*time.Millisecond; took > bound+300*time.Millisecond {
		t.Errorf("promoted pg1 up %v after the promotion; bound %v", took, bound)
	}
	writes(80, replica, "pg1") // the 40 streamed before the promotion, 40 new
	t.Logf("40 writes on the primary, none on the replica; promoted replica up after %v; 40 writes there", took)
}
