package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// TestReplicaLagLeavesVIP: a read VIP (role = "replica", max_lag = 2s)
// over two real streaming replicas of a primary that takes a write every
// 100 ms. Pausing one replica's replay (pg_wal_replay_pause) takes it out
// within interval + timeout after its lag passes max_lag, with the lag as
// the reason, and new connections all go to the other; resuming brings
// it back. Then, with lag_weight, a paused replica stays in with its
// weight scaled down, and explain shows its lag.
func TestReplicaLagLeavesVIP(t *testing.T) {
	testutil.RequirePriv(t, "PostgreSQL runs as the postgres user")
	testutil.RequireTool(t, "initdb", "pg_ctl", "pg_basebackup")
	primary := testutil.StartPostgres(t, testutil.PostgresOptions{User: "l4lb", Password: "secret"})
	primary.Exec(t, "CREATE TABLE tick (n int)")
	r1, r2 := primary.StartReplica(t), primary.StartReplica(t)
	writeEvery(t, primary, 100*time.Millisecond)
	vip := testutil.FreeTCPAddr(t)
	conf := func(keys string) string {
		return pgVIP(vip, primary.User, primary.Password, `
interval = "500ms"
timeout = "500ms"
rise = 1
fall = 1
role = "replica"
`+keys, r1.Addr, r2.Addr)
	}
	rt := startRuntime(t, conf(`max_lag = "2s"`))
	for _, id := range []string{"pg1", "pg2"} {
		waitBackend(t, rt, "pg", id, 20*time.Second, "up with a lag under max_lag", func(b plane.BackendStatus) bool {
			return b.Health == "up" && b.ReplicaLag.Seconds != nil && *b.ReplicaLag.Seconds < 2
		})
	}
	waitBoth(t, rt, vip)

	r1.Exec(t, "SELECT pg_wal_replay_pause()")
	// A login slower than the timeout on a busy machine also takes a
	// replica down (fall = 1), and the reason of a down backend is the
	// check that took it down: wait for a down backend whose last check
	// failed for its lag.
	took := waitBackend(t, rt, "pg", "pg1", 20*time.Second, "down for its lag", func(b plane.BackendStatus) bool {
		return b.Health == "down" && strings.HasPrefix(b.LastCheck, "replica lag")
	})
	b, _ := backendStatus(rt, "pg", "pg1")
	if !strings.HasSuffix(b.LastCheck, " > max_lag 2s") || b.ReplicaLag.Seconds == nil || *b.ReplicaLag.Seconds <= 2 {
		t.Fatalf("paused replica down with last check %q, lag %+v", b.LastCheck, b.ReplicaLag)
	}
	if !strings.HasPrefix(b.Reason, "replica lag ") {
		t.Logf("down first for %q (a slow login), then for its lag", b.Reason)
	}
	// Lag reaches max_lag 2s after the pause (a write every 100 ms); then
	// interval (+10% jitter) + timeout, plus a login's time on a busy machine.
	bound := 2*time.Second + 550*time.Millisecond + 500*time.Millisecond
	t.Logf("down %v after the pause (max_lag + interval + timeout = %v)", took.Round(time.Millisecond), bound)
	if took > bound+2*time.Second {
		t.Errorf("paused replica left the VIP after %v; bound %v", took, bound)
	}
	if n := connectN(t, rt, vip, 10); n["pg1"] != 0 {
		t.Fatalf("with pg1 lagging, connections by backend %v, want none on pg1", n)
	}

	r1.Exec(t, "SELECT pg_wal_replay_resume()")
	waitBackend(t, rt, "pg", "pg1", 20*time.Second, "back up after resume", func(b plane.BackendStatus) bool { return b.Health == "up" })
	waitBoth(t, rt, vip)

	apply(t, rt, conf(`max_lag = "1m"`+"\n"+`lag_weight = "1s"`))
	r1.Exec(t, "SELECT pg_wal_replay_pause()")
	waitBackend(t, rt, "pg", "pg1", 20*time.Second, "weight scaled down by its lag", func(b plane.BackendStatus) bool {
		return b.Health == "up" && b.EffectiveWeight > 0 && b.EffectiveWeight < b.Weight
	})
	e, err := rt.Explain("pg", clientAddr(2, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range e.Candidates {
		if c.ID == "pg1" && (!c.Candidate || c.ReplicaLag.Seconds == nil || *c.ReplicaLag.Seconds <= 1 || c.EffectiveWeight >= c.Weight) {
			t.Errorf("explain of the lagging replica: %+v", c)
		}
	}
	r1.Exec(t, "SELECT pg_wal_replay_resume()")
	waitBackend(t, rt, "pg", "pg1", 20*time.Second, "full weight after resume", func(b plane.BackendStatus) bool { return b.EffectiveWeight == b.Weight })
}

// waitBoth connects through vip until both replicas have taken some
// connections (a probe slower than its timeout on a busy machine can take
// one out for a moment).
func waitBoth(t *testing.T, rt *Runtime, vip netip.AddrPort) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := connectN(t, rt, vip, 10)
		if n["pg1"] > 0 && n["pg2"] > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections by backend %v, want both replicas to take some", n)
		}
	}
}

// writeEvery inserts a row on p every d until the test ends, over one
// superuser connection.
func writeEvery(t *testing.T, p *testutil.Postgres, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", p.SocketDir, p.Addr.Port()))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(d)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			if _, err := conn.Exec(ctx, "INSERT INTO tick VALUES (1)"); err != nil && ctx.Err() == nil {
				t.Errorf("writer: %v", err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		conn.Close(context.Background())
	})
}
