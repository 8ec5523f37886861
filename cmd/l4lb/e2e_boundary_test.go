// Closing at a boundary of the app_protocol against the real daemon:
// pgbench through a rebalance, with and without app_protocol = "postgres".

package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// TestPgbenchRebalanceAtBoundary: pgbench's TPC-B-like script, a new
// connection per transaction (-C), through two VIPs over the same two
// servers, source_hash: every connection of the one client goes to one
// server, so `l4lb rebalance` closes connections again and again while
// pgbench runs (each client comes back to the same server by the hash).
// On the VIP without app_protocol each close is a FIN in the middle of a
// session: pgbench's clients abort (the test proves it can fail). On the
// VIP with app_protocol = "postgres" each close waits for the
// ReadyForQuery 'I' that ends a transaction: not one client aborts, no
// transaction fails, and status counts the closes at a boundary.
func TestPgbenchRebalanceAtBoundary(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	pg := startPgPair(t, tp)
	c := newConf()
	for _, v := range []struct{ name, port, app string }{{"plain", ":5432", "none"}, {"pg", ":5433", "postgres"}} {
		c.vip(v.name, v.port, `algorithm = "source_hash"`, `rebalance_rate = 200`, `connect_timeout = "500ms"`,
			fmt.Sprintf("app_protocol = %q", v.app)).
			health(append([]string{`type = "postgres"`, `user = "l4lb"`, `rise = 1`}, pgHealth...)...).at("pg0", pg[0].Addr).at("pg1", pg[1].Addr)
	}
	lb := startLB(t, tp, c.String())
	for _, v := range []string{"plain", "pg"} {
		lb.waitHealth(t, v, "pg0", "up")
		lb.waitHealth(t, v, "pg1", "up")
	}

	// run runs pgbench through vip and asks for a rebalance every 300ms
	// meanwhile (refused while one runs); it returns pgbench's result and
	// how many connections the rebalances closed.
	run := func(vip, port string) (pgbenchResult, int) {
		wait := startPgbenchVIP(t, tp, "-p", port, "-b", "tpcb-like", "-C", "-c", "8", "-T", "5")
		closed := map[time.Time]int{} // by rebalance (its start)
		note := func() {
			if rb := vipNamed(lb.status(t), vip).Rebalance; rb != nil {
				closed[rb.Started] = rb.Closed
			}
		}
		for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
			lb.run(t, "rebalance", vip)
			note()
		}
		r := wait()
		note()
		n := 0
		for _, k := range closed {
			n += k
		}
		return r, n
	}

	plain, plainClosed := run("plain", "5432")
	t.Logf("app_protocol = none: %d rebalance closes; %d processed, %d failed, %d clients aborted", plainClosed, plain.processed, plain.failed, plain.aborted)
	if plainClosed == 0 || plain.aborted == 0 {
		t.Fatalf("app_protocol = none: %d closes, %d clients aborted; want closes that abort clients (a FIN mid-session)\n%s", plainClosed, plain.aborted, plain.out)
	}

	r, closed := run("pg", "5433")
	st := vipNamed(lb.status(t), "pg")
	t.Logf("app_protocol = postgres: %d rebalance closes; %d processed, %d failed, %d clients aborted; status: %d at a boundary, %d fallbacks",
		closed, r.processed, r.failed, r.aborted, st.TCP.BoundaryCloses, st.TCP.BoundaryFallbacks)
	if closed == 0 || r.aborted != 0 || r.failed != 0 || r.processed == 0 {
		t.Fatalf("app_protocol = postgres: %d closes, %d processed, %d failed, %d clients aborted; want closes, none failed or aborted\n%s", closed, r.processed, r.failed, r.aborted, r.out)
	}
	if st.TCP.BoundaryCloses == 0 || st.TCP.BoundaryFallbacks != 0 {
		t.Fatalf("status: %d closes at a boundary, %d fallbacks; want some, and none", st.TCP.BoundaryCloses, st.TCP.BoundaryFallbacks)
	}
}
