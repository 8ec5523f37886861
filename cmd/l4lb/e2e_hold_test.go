// failover_hold end to end: a planned PostgreSQL switchover (the primary
// drained, stopped, its streaming replica promoted) under pgbench -C
// loses no connection with the hold, and loses clients without it.

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// switchoverRun is what one switchover under pgbench showed.
type switchoverRun struct {
	pgbench pgbenchResult
	vip     plane.VIPStatus // after the run
	during  string          // the text status while clients were held (hold on)
}

// switchover runs pgbench -C (select-only, 4 clients on 4 threads: a
// client held in its connect blocks its thread; rate-limited, 4 s)
// through a VIP with role = "primary" checks in front of a primary and its
// streaming replica, and meanwhile does what PgBouncer's PAUSE/RESUME is
// for: drain the primary (no new connections; pgbench's end by
// themselves), stop it once it holds none, promote the replica and wait
// until the VIP takes it. From the drain until the promoted replica is
// up, the VIP has no eligible backend. hold is the VIP's failover_hold.
func switchover(t *testing.T, hold string) switchoverRun {
	t.Helper()
	testutil.RequireTool(t, "pgbench", "pg_basebackup")
	tp := testutil.NewTopology(t, 2)
	primary := testutil.StartPostgres(t, testutil.PostgresOptions{Netns: tp.Backends[0], Addr: tp.BackendIP(0), User: "l4lb"})
	pgbenchInit(t, primary)
	replica := primary.StartReplicaAt(t, tp.Backends[1], tp.BackendIP(1))
	conf := newConf().vip("pg", ":5432", `algorithm = "least_conn"`, `connect_timeout = "500ms"`, `failover_hold = "`+hold+`"`).
		health(`type = "postgres"`, `user = "l4lb"`, `role = "primary"`, `interval = "500ms"`, `timeout = "500ms"`, `rise = 1`, `fall = 1`).
		at("pg0", primary.Addr).at("pg1", replica.Addr).String()
	lb := startLB(t, tp, conf)
	lb.waitHealth(t, "pg", "pg0", "up")
	lb.waitHealth(t, "pg", "pg1", "down")

	wait := startPgbenchVIP(t, tp, "-S", "-C", "-c", "4", "-j", "4", "-T", "4", "-R", "200")
	lb.waitStatus(t, 5*time.Second, "pgbench connections", func(st plane.Status) bool { return backendOf(st, "pg", "pg0").Flows >= 20 })
	lb.verb(t, "drain", "pg", "pg0")
	var run switchoverRun
	if hold != "0s" {
		lb.waitStatus(t, 5*time.Second, "clients held", func(st plane.Status) bool { return mustVIP(t, st, "pg").TCP.Holding > 0 })
		run.during = lb.statusText(t)
	}
	lb.waitStatus(t, 5*time.Second, "pg0's connections to end", func(st plane.Status) bool { return backendOf(st, "pg", "pg0").LiveFlows == 0 })
	primary.Stop(t)
	replica.Promote(t)
	lb.waitHealth(t, "pg", "pg1", "up")
	run.pgbench = wait()
	run.vip = lb.vip(t, "pg")
	return run
}

// TestFailoverHoldSwitchover: with failover_hold = "5s" every pgbench
// connection of the switchover succeeds: none failed, no client aborted,
// every connection that came while no backend was eligible was held and
// then released to the promoted replica, none reset; the text status
// showed them held. With the hold off (0s, as before it existed) the same
// switchover resets clients: pgbench reports aborted clients, l4lb counts
// no_backend. The second half proves the first can fail.
func TestFailoverHoldSwitchover(t *testing.T) {
	on := switchover(t, "5s")
	r, tcp := on.pgbench, on.vip.TCP
	if r.failed != 0 || r.aborted != 0 {
		t.Fatalf("failover_hold 5s: %d failed, %d clients aborted:\n%s", r.failed, r.aborted, r.out)
	}
	if tcp.Held == 0 || tcp.HoldReleased != tcp.Held || tcp.HoldExpired != 0 || tcp.HoldOverflows != 0 || tcp.Holding != 0 || on.vip.NoBackend != 0 {
		t.Fatalf("failover_hold 5s: held %d, released %d, expired %d, full %d, holding %d, no_backend %d",
			tcp.Held, tcp.HoldReleased, tcp.HoldExpired, tcp.HoldOverflows, tcp.Holding, on.vip.NoBackend)
	}
	if !strings.Contains(on.during, "failover hold: holding ") {
		t.Fatalf("text status during the hold shows no held clients:\n%s", on.during)
	}
	t.Logf("failover_hold 5s: %d transactions, 0 failed; %d connections held, all released; status during the hold:\n%s", r.processed, tcp.Held, on.during)

	off := switchover(t, "0s")
	if off.pgbench.aborted == 0 || off.vip.NoBackend == 0 {
		t.Fatalf("failover_hold off: %d clients aborted, no_backend %d: the switchover should have reset clients:\n%s",
			off.pgbench.aborted, off.vip.NoBackend, off.pgbench.out)
	}
	t.Logf("failover_hold off: %d of 4 pgbench clients aborted, %d clients reset (no_backend)", off.pgbench.aborted, off.vip.NoBackend)
}
