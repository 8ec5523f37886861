// End-to-end tests with PostgreSQL's own client, pgbench, through a VIP in
// front of real servers: spreading, a server lost mid-run, role = "primary"
// across a promotion.
package main

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// pgVIP is a least_conn VIP on 198.18.2.10:5432 over two servers; %s are
// the health section's extra lines and the two backend addresses.
const pgVIP = `
[global]
admin_socket = "@ADMIN@"

[[vip]]
name = "pg"
listen = "198.18.2.10:5432"
protocol = "tcp"
algorithm = "%s"
connect_timeout = "500ms"
retries = 2
  [vip.health]
  type = "postgres"
  interval = "300ms"
  timeout = "200ms"
  rise = 1
  fall = 2
  user = "l4lb"
%s
  [[vip.backend]]
  name = "pg0"
  address = "%s"
  [[vip.backend]]
  name = "pg1"
  address = "%s"
`

// pgbenchResult is what the tests read from pgbench's report (PostgreSQL
// 15: "number of transactions actually processed: N", "number of failed
// transactions: N (x%)", and one "client N aborted" error per client that
// hit an error other than a serialization failure or deadlock; pgbench 15
// neither retries nor reconnects such a client, it stops it).
type pgbenchResult struct {
	processed, failed, aborted int
	out                        string
}

var (
	pgbenchProcessed = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	pgbenchFailed    = regexp.MustCompile(`number of failed transactions: (\d+)`)
	pgbenchAborted   = regexp.MustCompile(`client \d+ aborted`)
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

func backendByID(st reconcile.Status, id string) reconcile.BackendStatus {
	for _, b := range st.VIPs[0].Backends {
		if b.ID == id {
			return b
		}
	}
	return reconcile.BackendStatus{}
}

func waitHealth(t *testing.T, lb *lbProcess, id, health string) {
	t.Helper()
	waitStatus(t, lb, 5*time.Second, id+" "+health, func(st reconcile.Status) bool {
		return backendByID(st, id).Health == health
	})
}

// TestPgbenchThroughVIP: pgbench's select-only and TPC-B-like scripts,
// one new connection per transaction (-C), through a least_conn VIP over
// two servers: no transaction fails, no client aborts, and both servers
// carry connections.
func TestPgbenchThroughVIP(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	pg := startPgPair(t, tp)
	lb := startLB(t, tp, fmt.Sprintf(pgVIP, "least_conn", "", pg[0].Addr, pg[1].Addr))
	waitHealth(t, lb, "pg0", "up")
	waitHealth(t, lb, "pg1", "up")

	// A bounded count per client (-t), not a duration: every one of the
	// 4 x 10 transactions must be processed.
	for _, script := range [][]string{{"-S"}, {"-b", "tpcb-like"}} {
		before := lbStatus(t, lb)
		r := pgbenchVIP(t, tp, append(script, "-C", "-c", "4", "-t", "10")...)
		after := lbStatus(t, lb)
		if r.failed != 0 || r.aborted != 0 || r.processed != 40 {
			t.Fatalf("pgbench %v: %d processed, %d failed, %d clients aborted:\n%s", script, r.processed, r.failed, r.aborted, r.out)
		}
		flows := [2]uint64{}
		for i, id := range []string{"pg0", "pg1"} {
			flows[i] = backendByID(after, id).Flows - backendByID(before, id).Flows
		}
		// least_conn with two equal servers: each gets a share; a lopsided
		// split within 1:4 is normal over a couple of hundred connections.
		if total := flows[0] + flows[1]; flows[0] < total/5 || flows[1] < total/5 {
			t.Fatalf("pgbench %v: connections per server %v", script, flows)
		}
		t.Logf("pgbench %v -C: %d transactions, 0 failed; connections per server %v", script, r.processed, flows)
	}
}
