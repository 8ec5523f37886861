// lag_pg_test.go: a replica check reads the lag of a real PostgreSQL streaming replica.

package health

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// TestPostgresReplicaLag: a caught-up replica of an idle primary has lag
// 0 (however old its last replayed commit); with replay paused while the
// primary writes, the lag grows past max_lag and the check fails saying
// so; resumed, it passes again; with its primary gone the replica has no
// WAL receiver and the lag is unknown. The probe user is a plain LOGIN
// role (no pg_read_all_stats), as most operators would create.
func TestPostgresReplicaLag(t *testing.T) {
	t.Parallel()
	p := testutil.StartPostgres(t, testutil.PostgresOptions{User: "probe", Password: "pw"})
	p.Exec(t, "CREATE TABLE tick (n int)")
	r := p.StartReplica(t)
	spec := Spec{Type: l4.CheckPostgres, User: "probe", Password: "pw", Role: l4.RoleReplica, MaxLag: time.Second}
	p.Exec(t, "INSERT INTO tick VALUES (0)") // a replayed commit: its age is the lag once replay falls behind

	testutil.Eventually(t, 20*time.Second, "the replica replays the insert", func() bool { return r.QueryInt(t, "SELECT count(*) FROM tick") == 1 })
	waitCheck(t, spec, r.Addr, "caught up", func(res Result) bool { return res.OK && res.Lag.Known && res.Lag.Lag == 0 })
	time.Sleep(1500 * time.Millisecond) // the last replayed commit is now older than max_lag: no matter, nothing to replay
	if res := check(t, spec, r.Addr); !res.OK || res.Lag != knownLag(0) {
		t.Fatalf("idle primary: ok %v %q lag %+v, want ok with lag 0", res.OK, res.Reason, res.Lag)
	}
	noLimit := spec
	noLimit.MaxLag = 0

	r.Exec(t, "SELECT pg_wal_replay_pause()")
	p.Exec(t, "INSERT INTO tick VALUES (1)")
	res := waitCheck(t, spec, r.Addr, "lag above max_lag", func(res Result) bool { return !res.OK })
	if !strings.HasPrefix(res.Reason, "replica lag ") || !strings.HasSuffix(res.Reason, " > max_lag 1s") || !res.Lag.Known || res.Lag.Lag <= time.Second {
		t.Fatalf("paused replay: %q, lag %+v", res.Reason, res.Lag)
	}
	if res := check(t, noLimit, r.Addr); !res.OK || !res.Lag.Known || res.Lag.Lag <= time.Second {
		t.Fatalf("without max_lag the lag is read and the check passes: ok %v %q lag %+v", res.OK, res.Reason, res.Lag)
	}

	r.Exec(t, "SELECT pg_wal_replay_resume()")
	waitCheck(t, spec, r.Addr, "caught up after resume", func(res Result) bool { return res.OK && res.Lag == knownLag(0) })
	// With pg_read_all_stats the probe sees the receiver's status too.
	p.Exec(t, "GRANT pg_read_all_stats TO probe")
	testutil.Eventually(t, 20*time.Second, "the grant reaches the replica", func() bool {
		return r.QueryInt(t, "SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = 'probe'") == 1
	})
	waitCheck(t, spec, r.Addr, "caught up, status streaming", func(res Result) bool { return res.OK && res.Lag == knownLag(0) })

	if res := check(t, Spec{Type: l4.CheckPostgres, User: "probe", Password: "pw", Role: l4.RolePrimary}, p.Addr); res.Lag.Read {
		t.Errorf("a primary check read a lag: %+v", res.Lag)
	}
	p.Stop(t)
	res = waitCheck(t, spec, r.Addr, "no WAL receiver", func(res Result) bool { return !res.OK })
	if want := "replica lag unknown: no WAL receiver: not streaming from a primary (max_lag 1s)"; res.Reason != want {
		t.Fatalf("primary gone: %q, want %q", res.Reason, want)
	}
}

// waitCheck checks addr until cond holds (or fails the test after 20 s).
func waitCheck(t *testing.T, spec Spec, addr netip.AddrPort, what string, cond func(Result) bool) Result {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := check(t, spec, addr)
		if cond(res) {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last check ok %v %q lag %+v", what, res.OK, res.Reason, res.Lag)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
