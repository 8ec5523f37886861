package reconcile

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// pgVIP is VIP "pg" on listen over two PostgreSQL servers, pg1 and pg2,
// with a postgres check logging in as user; health holds the check's
// other keys, one a line.
func pgVIP(listen netip.AddrPort, user, password, health string, pg1, pg2 netip.AddrPort) string {
	return fmt.Sprintf(`
[global]
admin_socket = "off"
[[vip]]
name = "pg"
listen = "%s"
  [vip.health]
  type = "postgres"
  max_fails = 0
  user = "%s"
  password = "%s"
  %s
  [[vip.backend]]
  name = "pg1"
  address = "%s"
  [[vip.backend]]
  name = "pg2"
  address = "%s"
`, listen, user, password, strings.ReplaceAll(strings.TrimSpace(health), "\n", "\n  "), pg1, pg2)
}

// TestRoleFollowsPromotion: a role = "primary" VIP in front of a real
// PostgreSQL primary and its streaming replica sends every connection to
// the primary; promote the replica and stop the old primary, and the VIP
// follows within the detection bound.
func TestRoleFollowsPromotion(t *testing.T) {
	testutil.RequirePriv(t, "PostgreSQL runs as the postgres user")
	testutil.RequireTool(t, "initdb", "pg_ctl", "pg_basebackup")
	primary := testutil.StartPostgres(t, testutil.PostgresOptions{User: "l4lb", Password: "secret"})
	replica := primary.StartReplica(t)
	vip := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, pgVIP(vip, primary.User, primary.Password, `
interval = "250ms"
timeout = "200ms"
rise = 1
fall = 2
role = "primary"
on_down = "reset"`, primary.Addr, replica.Addr))

	waitBackend(t, rt, "pg", "pg1", 5*time.Second, "up (primary)", func(b plane.BackendStatus) bool { return b.Health == "up" })
	waitBackend(t, rt, "pg", "pg2", 5*time.Second, "down (replica)", func(b plane.BackendStatus) bool { return b.Health == "down" })
	if n := connectN(t, rt, vip, 10); n["pg1"] != 10 {
		t.Fatalf("connections by backend %v, want all 10 on the primary pg1", n)
	}

	replica.Promote(t)
	primary.Stop(t)
	start := time.Now()
	waitBackend(t, rt, "pg", "pg2", 5*time.Second, "up (promoted)", func(b plane.BackendStatus) bool { return b.Health == "up" })
	waitBackend(t, rt, "pg", "pg1", 5*time.Second, "down (stopped)", func(b plane.BackendStatus) bool { return b.Health == "down" })
	took := time.Since(start)
	// fall x interval + timeout, plus jitter and one login's time.
	if bound := 2*250*time.Millisecond + 200*time.Millisecond; took > bound+time.Second {
		t.Errorf("VIP followed the promotion after %v; bound %v", took, bound)
	}
	if n := connectN(t, rt, vip, 10); n["pg2"] != 10 {
		t.Fatalf("after promotion, connections by backend %v, want all 10 on pg2", n)
	}
}

// connectN opens and closes n connections through vip (sending nothing, so
// PostgreSQL logs nothing) and returns how many each backend received.
func connectN(t *testing.T, rt *Runtime, vip netip.AddrPort, n int) map[string]int {
	t.Helper()
	before := map[string]uint64{}
	for _, id := range []string{"pg1", "pg2"} {
		b, _ := backendStatus(rt, "pg", id)
		before[id] = b.Flows
	}
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp4", vip.String(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	got := map[string]int{}
	deadline := time.Now().Add(2 * time.Second)
	for {
		total := 0
		for _, id := range []string{"pg1", "pg2"} {
			b, _ := backendStatus(rt, "pg", id)
			got[id] = int(b.Flows - before[id])
			total += got[id]
		}
		if total >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}
