// End-to-end tests with MariaDB's own load client, mysqlslap, through a
// VIP in front of real servers, and the server-speaks-first handshake.

package main

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// mysqlConf: 198.18.2.10:3306 (defer_accept off, the default) and :3307
// (defer_accept on) over the two servers a and b with logged-in mysql
// probes.
func mysqlConf(a, b netip.AddrPort) string {
	return newConf().raw(`
[defaults]
algorithm = "least_conn"
connect_timeout = "500ms"
retries = 2
  [defaults.health]
  type = "mysql"
  user = "l4lb"
  password = "pw"
  interval = "500ms"
  timeout = "500ms"
  rise = 1
  fall = 2
`).vip("my", ":3306").at("my0", a).at("my1", b).vip("deferred", ":3307", `defer_accept = true`).at("my0", a).at("my1", b).String()
}

// startMySQLLB starts two servers (startMySQLPair) and l4lb in front of
// them (mysqlConf), and waits until both are up.
func startMySQLLB(t *testing.T) (*testutil.Topology, [2]*testutil.MySQL, *lbProcess) {
	t.Helper()
	tp := testutil.NewTopology(t, 2)
	my := startMySQLPair(t, tp)
	lb := startLB(t, tp, mysqlConf(my[0].Addr, my[1].Addr))
	lb.waitHealth(t, "my", "my0", "up")
	lb.waitHealth(t, "my", "my1", "up")
	return tp, my, lb
}

// startMySQLPair starts MariaDB in backends 0 and 1, each with a user
// l4lb (all privileges) and an empty table slap.t.
func startMySQLPair(t *testing.T, tp *testutil.Topology) [2]*testutil.MySQL {
	t.Helper()
	var my [2]*testutil.MySQL
	for i := range my {
		my[i] = testutil.StartMySQL(t, testutil.MySQLOptions{Netns: tp.Backends[i],
			Addr: tp.BackendIP(i), User: "l4lb", Password: "pw"})
		my[i].Exec(t, "GRANT ALL ON *.* TO 'l4lb'@'%'")
		my[i].Exec(t, "CREATE DATABASE slap")
		my[i].Exec(t, "CREATE TABLE slap.t (id INT AUTO_INCREMENT PRIMARY KEY)")
	}
	return my
}

// TestMysqlslapThroughVIP: mysqlslap, 8 clients each reconnecting every
// 10 queries, runs 2000 INSERTs through the VIP: it reports no error,
// and the rows on the two servers add up to exactly 2000, both servers
// holding some (no query lost, none doubled, both carry connections).
func TestMysqlslapThroughVIP(t *testing.T) {
	testutil.RequireTool(t, "mysqlslap")
	tp, my, lb := startMySQLLB(t)

	const queries = 2000
	out, err := tp.Client.Command("mysqlslap", "--no-defaults", "--protocol=tcp", "-h", tp.VIP.String(), "-P", "3306",
		"-u", "l4lb", "-ppw", "--create-schema=slap", "--query=INSERT INTO t VALUES (NULL)",
		"--concurrency=8", fmt.Sprintf("--number-of-queries=%d", queries), "--detach=10", "--iterations=1").CombinedOutput()
	if err != nil || strings.Contains(strings.ToLower(string(out)), "error") {
		t.Fatalf("mysqlslap: %v:\n%s", err, out)
	}
	rows := [2]int64{my[0].QueryInt(t, "SELECT COUNT(*) FROM slap.t"), my[1].QueryInt(t, "SELECT COUNT(*) FROM slap.t")}
	if rows[0]+rows[1] != queries || rows[0] < queries/5 || rows[1] < queries/5 {
		t.Fatalf("rows per server %v, want %d in all, spread over both\nmysqlslap:\n%s", rows, queries, out)
	}
	st := lb.status(t)
	t.Logf("mysqlslap: %d INSERTs, 0 errors, rows per server %v, connections per server [%d %d]",
		queries, rows, backendOf(st, "my", "my0").Flows, backendOf(st, "my", "my1").Flows)
}

// TestMySQLServerSpeaksFirst: a MySQL client sends nothing until it has
// the server's greeting. Through the VIP (defer_accept off) the greeting
// arrives without the client sending a byte, within a short deadline: no
// part of l4lb waits for a client byte before it dials the backend. With
// defer_accept = true the kernel holds the connection from l4lb until the
// client speaks or about a second passes, so no greeting comes within the
// same deadline: the hazard README and check describe.
func TestMySQLServerSpeaksFirst(t *testing.T) {
	tp, _, _ := startMySQLLB(t)

	const deadline = 300 * time.Millisecond
	for i := range 10 {
		took, err := mysqlGreeting(tp, 3306, deadline)
		if err != nil {
			t.Fatalf("greeting %d through the VIP: %v", i, err)
		}
		if i == 0 {
			t.Logf("greeting through the VIP after %v without a client byte", took)
		}
	}
	if took, err := mysqlGreeting(tp, 3307, deadline); err == nil {
		t.Fatalf("defer_accept VIP: greeting after %v; TCP_DEFER_ACCEPT should hold a silent client", took)
	}
}

// mysqlGreeting connects to the VIP's port from the client namespace,
// sends nothing, and reads the server's initial handshake packet: a
// 4-byte header, then protocol version 10.
func mysqlGreeting(tp *testutil.Topology, port int, d time.Duration) (time.Duration, error) {
	var c net.Conn
	start := time.Now()
	err := tp.Client.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", tp.VIP, port), d)
		return err
	})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetReadDeadline(start.Add(d))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return 0, fmt.Errorf("reading the greeting: %w", err)
	}
	if hdr[3] != 0 || hdr[4] != 10 {
		return 0, fmt.Errorf("not a protocol-10 greeting: % x", hdr)
	}
	return time.Since(start), nil
}
