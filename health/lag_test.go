// lag_test.go: reading a replica's lag from the servers' answers, max_lag's verdict and lag_weight's scale.

package health

import (
	"database/sql/driver"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

func TestPostgresLagRow(t *testing.T) {
	streaming, waiting := "streaming", "waiting"
	age := 7.25
	cases := []struct {
		name string
		row  pgLagRow
		want ReplicaLag
	}{
		{"no receiver", pgLagRow{caughtUp: true, replayAge: &age}, unknownLag("no WAL receiver: not streaming from a primary")},
		{"receiver waiting", pgLagRow{receiver: true, status: &waiting, caughtUp: true}, unknownLag("WAL receiver waiting, not streaming")},
		{"idle primary", pgLagRow{receiver: true, status: &streaming, caughtUp: true, replayAge: &age}, knownLag(0)},
		{"status hidden, caught up", pgLagRow{receiver: true, caughtUp: true}, knownLag(0)},
		{"behind", pgLagRow{receiver: true, status: &streaming, replayAge: &age}, knownLag(7250 * time.Millisecond)},
		{"behind, status hidden", pgLagRow{receiver: true, replayAge: &age}, knownLag(7250 * time.Millisecond)},
		{"nothing replayed yet", pgLagRow{receiver: true, status: &streaming}, unknownLag("no transaction replayed since the server started")},
	}
	for _, c := range cases {
		if got := c.row.lag(); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	neg := -0.5 // the primary's clock ahead of the replica's
	if got := (pgLagRow{receiver: true, replayAge: &neg}).lag(); got != knownLag(0) {
		t.Errorf("clock skew: got %+v, want 0", got)
	}
}

func TestMySQLLag(t *testing.T) {
	maria := []string{"Slave_IO_State", "Slave_IO_Running", "Slave_SQL_Running", "Seconds_Behind_Master"}
	mysql8 := []string{"Replica_IO_State", "Replica_IO_Running", "Replica_SQL_Running", "Seconds_Behind_Source"}
	row := func(io, sql string, behind driver.Value) []driver.Value {
		return []driver.Value{[]byte("x"), []byte(io), []byte(sql), behind}
	}
	cases := []struct {
		name string
		cols []string
		rows [][]driver.Value
		want ReplicaLag
	}{
		{"not a replica", maria, nil, unknownLag("not replicating (replica status is empty)")},
		{"caught up", maria, [][]driver.Value{row("Yes", "Yes", []byte("0"))}, knownLag(0)},
		{"behind", maria, [][]driver.Value{row("Yes", "Yes", []byte("7"))}, knownLag(7 * time.Second)},
		{"mysql 8 names", mysql8, [][]driver.Value{row("Yes", "Yes", int64(3))}, knownLag(3 * time.Second)},
		{"sql thread stopped", maria, [][]driver.Value{row("Yes", "No", nil)}, unknownLag("SQL thread not running (Slave_SQL_Running: No)")},
		{"null", maria, [][]driver.Value{row("Connecting", "Yes", nil)}, unknownLag("Seconds_Behind_Master is NULL")},
		{"channels: the worst", mysql8, [][]driver.Value{row("Yes", "Yes", []byte("2")), row("Yes", "Yes", []byte("9"))}, knownLag(9 * time.Second)},
		{"channels: one unknown", mysql8, [][]driver.Value{row("Yes", "Yes", []byte("2")), row("Yes", "No", nil)}, unknownLag("SQL thread not running (Replica_SQL_Running: No)")},
		{"no such column", []string{"a", "b", "c", "d"}, [][]driver.Value{row("Yes", "Yes", []byte("2"))}, unknownLag("replica status lacks Seconds_Behind_Master or Slave_SQL_Running")},
	}
	for _, c := range cases {
		if got := mysqlLag(c.cols, c.rows); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestJudgeLag(t *testing.T) {
	cases := []struct {
		name   string
		lag    ReplicaLag
		maxLag time.Duration
		want   string // "" = passes
	}{
		{"off, unknown", unknownLag("no WAL receiver"), 0, ""},
		{"off, far behind", knownLag(time.Hour), 0, ""},
		{"below", knownLag(4 * time.Second), 5 * time.Second, ""},
		{"at", knownLag(5 * time.Second), 5 * time.Second, ""},
		{"above", knownLag(7240 * time.Millisecond), 5 * time.Second, "replica lag 7.2s > max_lag 5s"},
		{"unknown", unknownLag("no WAL receiver"), 5 * time.Second, "replica lag unknown: no WAL receiver (max_lag 5s)"},
	}
	for _, c := range cases {
		p := &probe{}
		p.pass()
		judgeLag(p, c.lag, c.maxLag)
		if p.res.Reason != c.want || p.res.OK != (c.want == "") || p.res.Lag != c.lag {
			t.Errorf("%s: got ok %v %q lag %+v, want %q", c.name, p.res.OK, p.res.Reason, p.res.Lag, c.want)
		}
	}
	p := &probe{}
	p.fail("role primary, want replica")
	judgeLag(p, unknownLag("x"), time.Second)
	if p.res.Reason != "role primary, want replica" {
		t.Errorf("an earlier failure was replaced: %q", p.res.Reason)
	}
}

func TestLagWeight(t *testing.T) {
	const soft, hard = 2 * time.Second, 6 * time.Second
	cases := []struct {
		name       string
		weight     uint32
		lag        ReplicaLag
		soft, hard time.Duration
		want       uint32
	}{
		{"off", 100, knownLag(5 * time.Second), 0, hard, 100},
		{"not read", 100, ReplicaLag{}, soft, hard, 100},
		{"no lag", 100, knownLag(0), soft, hard, 100},
		{"at soft", 100, knownLag(soft), soft, hard, 100},
		{"a quarter in", 100, knownLag(3 * time.Second), soft, hard, 77},
		{"half way", 100, knownLag(4 * time.Second), soft, hard, 55},
		{"at hard", 100, knownLag(hard), soft, hard, 10},
		{"above hard", 100, knownLag(time.Minute), soft, hard, 10},
		{"unknown", 100, unknownLag("no WAL receiver"), soft, hard, 10},
		{"weight 1", 1, knownLag(5 * time.Second), soft, hard, 1},
		{"weight 5 floor is 1", 5, unknownLag("x"), soft, hard, 1},
		{"drain stays 0", 0, knownLag(5 * time.Second), soft, hard, 0},
	}
	for _, c := range cases {
		if got := LagWeight(c.weight, c.lag, c.soft, c.hard); got != c.want {
			t.Errorf("%s: LagWeight(%d, %+v) = %d, want %d", c.name, c.weight, c.lag, got, c.want)
		}
	}
	// Monotone: more lag never gives more weight.
	prev := uint32(1000)
	for d := time.Duration(0); d <= 8*time.Second; d += 50 * time.Millisecond {
		w := LagWeight(1000, knownLag(d), soft, hard)
		if w > prev || w < 100 {
			t.Fatalf("lag %v: weight %d after %d (floor 100)", d, w, prev)
		}
		prev = w
	}
	// Composed with slow start: the lower bound of both applies.
	up := time.Unix(1_000_000, 0)
	ss := SlowStartWeight(100, up, up.Add(50*time.Second), 100*time.Second) // 55
	if got := LagWeight(ss, knownLag(4*time.Second), soft, hard); got != 30 {
		t.Errorf("slow start 55, half way down: %d, want 30", got)
	}
}

func TestLagString(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", 240 * time.Millisecond: "200ms", 7240 * time.Millisecond: "7.2s", 90 * time.Second: "1m30s"} {
		if got := l4.LagString(d); got != want {
			t.Errorf("LagString(%v) = %q, want %q", d, got, want)
		}
	}
	if got := unknownLag("no WAL receiver").String(); got != "unknown (no WAL receiver)" {
		t.Errorf("unknown: %q", got)
	}
}
