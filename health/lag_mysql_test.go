// lag_mysql_test.go: a replica check reads the lag of a real MariaDB replica.

package health

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// TestMySQLReplicaLag: a MariaDB replica (CHANGE MASTER TO, START SLAVE)
// that is caught up has lag 0; with MASTER_DELAY its SQL thread holds
// back what the primary writes and Seconds_Behind_Master rises past
// max_lag, failing the check with the lag; a stopped SQL thread is an
// unknown lag; a server that replicates from nobody too; and a user
// without REPLICA MONITOR cannot read it (unknown, which fails only with
// max_lag).
func TestMySQLReplicaLag(t *testing.T) {
	t.Parallel()
	primary := testutil.StartMySQL(t, testutil.MySQLOptions{Args: []string{"--log-bin=primary-bin", "--server-id=1"}})
	replica := testutil.StartMySQL(t, testutil.MySQLOptions{User: "probe", Password: "pw", Args: []string{"--server-id=2", "--read-only"}})
	replica.Exec(t, "GRANT REPLICA MONITOR ON *.* TO 'probe'@'%'")
	primary.Exec(t, "CREATE DATABASE app")
	primary.Exec(t, "CREATE TABLE app.tick (n int)")
	replica.Exec(t, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='root', MASTER_CONNECT_RETRY=1",
		primary.Addr.Addr(), primary.Addr.Port()))
	replica.Exec(t, "START SLAVE")
	spec := Spec{Type: l4.CheckMySQL, User: "probe", Password: "pw", Role: l4.RoleReplica, MaxLag: 2 * time.Second}

	testutil.Eventually(t, 20*time.Second, "the replica has the table", func() bool {
		return replica.QueryInt(t, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'app'") == 1
	})
	waitCheck(t, spec, replica.Addr, "caught up", func(res Result) bool { return res.OK && res.Lag == knownLag(0) })

	replica.Exec(t, "STOP SLAVE SQL_THREAD")
	res := waitCheck(t, spec, replica.Addr, "SQL thread stopped", func(res Result) bool { return !res.OK })
	if want := "replica lag unknown: SQL thread not running (Slave_SQL_Running: No) (max_lag 2s)"; res.Reason != want {
		t.Fatalf("SQL thread stopped: %q, want %q", res.Reason, want)
	}
	noLimit := spec
	noLimit.MaxLag = 0
	if res := check(t, noLimit, replica.Addr); !res.OK || res.Lag.Known || !res.Lag.Read {
		t.Fatalf("without max_lag an unknown lag passes: ok %v %q lag %+v", res.OK, res.Reason, res.Lag)
	}

	replica.Exec(t, "STOP SLAVE")
	replica.Exec(t, "CHANGE MASTER TO MASTER_DELAY = 4")
	replica.Exec(t, "START SLAVE")
	primary.Exec(t, "INSERT INTO app.tick VALUES (1)")
	// Restarted, the I/O thread connects first (NULL, unknown); then the
	// delayed SQL thread holds the insert back for 4 s.
	res = waitCheck(t, spec, replica.Addr, "delayed past max_lag", func(res Result) bool { return !res.OK && res.Lag.Known })
	if !strings.HasPrefix(res.Reason, "replica lag ") || !strings.HasSuffix(res.Reason, "s > max_lag 2s") || res.Lag.Lag <= 2*time.Second {
		t.Fatalf("delayed: %q, lag %+v", res.Reason, res.Lag)
	}
	waitCheck(t, spec, replica.Addr, "caught up after the delay", func(res Result) bool { return res.OK && res.Lag.Known })

	replica.Exec(t, "REVOKE REPLICA MONITOR ON *.* FROM 'probe'@'%'")
	res = check(t, noLimit, replica.Addr)
	if !res.OK || res.Lag.Known || !strings.Contains(res.Lag.Why, "error 1227") {
		t.Fatalf("no privilege, no max_lag: ok %v %q lag %+v, want ok and unknown (error 1227)", res.OK, res.Reason, res.Lag)
	}
	wantFail(t, check(t, spec, replica.Addr), "replica lag unknown: query failed: error 1227")

	replica.Exec(t, "STOP SLAVE")
	replica.Exec(t, "RESET SLAVE ALL")
	replica.Exec(t, "GRANT REPLICA MONITOR ON *.* TO 'probe'@'%'")
	wantFail(t, check(t, spec, replica.Addr), "replica lag unknown: not replicating (replica status is empty)")
}
