package reconcile

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

const backupVIP = `
[global]
admin_socket = "off"

[[vip]]
name = "db"
listen = "%s"
algorithm = "%s"
backup_mode = "%s"
retries = 0
  [vip.health]
  type = "tcp"
  interval = "100ms"
  timeout = "100ms"
  rise = 1
  fall = 1
  [[vip.backend]]
  name = "p1"
  address = "%s"
  [[vip.backend]]
  name = "p2"
  address = "%s"
  [[vip.backend]]
  name = "k1"
  address = "%s"
  backup = true
  [[vip.backend]]
  name = "k2"
  address = "%s"
  backup = true
`

// namesFrom dials the VIP n times from clients 127.0.0.2.. and counts the
// backends that answer, and which one each client reached.
func namesFrom(t *testing.T, vip netip.AddrPort, n int) (map[string]int, []string) {
	t.Helper()
	seen := map[string]int{}
	var byClient []string
	for i := range n {
		name := askFrom(t, vip, clientAddr(2+i, 0))
		seen[name]++
		byClient = append(byClient, name)
	}
	return seen, byClient
}

func serving(rt *Runtime) string {
	for _, v := range rt.Status().VIPs {
		return v.Serving
	}
	return ""
}

// TestBackupBackends: backups take no flows while a primary is eligible;
// when the primaries fail they take over (the first eligible one, or all,
// by backup_mode); when a primary comes back new flows return to it while
// established flows on the backups go on. With maglev each set has its
// own table: a client returns to the primary it had before the failover.
func TestBackupBackends(t *testing.T) {
	for _, tc := range []struct{ algorithm, mode string }{
		{"round_robin", "first"}, {"round_robin", "all"}, {"maglev", "all"},
	} {
		t.Run(tc.algorithm+"/"+tc.mode, func(t *testing.T) {
			s := map[string]*namedServer{}
			for _, n := range []string{"p1", "p2", "k1", "k2"} {
				s[n] = startNamed(t, n)
			}
			vip := testutil.FreeTCPAddr(t)
			rt := startRuntime(t, fmt.Sprintf(backupVIP, vip, tc.algorithm, tc.mode, s["p1"].addr, s["p2"].addr, s["k1"].addr, s["k2"].addr))
			for n := range s {
				waitBackend(t, rt, "db", n, 3*time.Second, "up", func(b plane.BackendStatus) bool { return b.Health == "up" })
			}
			if got := serving(rt); got != "primaries" {
				t.Fatalf("serving %q, want primaries", got)
			}
			seen, before := namesFrom(t, vip, 12)
			if seen["k1"]+seen["k2"] > 0 || seen["p1"] == 0 || seen["p2"] == 0 {
				t.Fatalf("with both primaries up: %v", seen)
			}

			s["p1"].kill()
			s["p2"].kill()
			for _, n := range []string{"p1", "p2"} {
				waitBackend(t, rt, "db", n, 3*time.Second, "down", func(b plane.BackendStatus) bool { return b.Health == "down" })
			}
			if got := serving(rt); got != "backups" {
				t.Fatalf("serving %q with the primaries down, want backups", got)
			}
			held := dialFrom(t, vip, clientAddr(40, 0))
			seen, _ = namesFrom(t, vip, 12)
			switch tc.mode {
			case "first":
				if seen["k1"] != 12 {
					t.Fatalf("backup_mode first: %v, want every flow on k1", seen)
				}
			case "all":
				if seen["k1"] == 0 || seen["k2"] == 0 || seen["k1"]+seen["k2"] != 12 {
					t.Fatalf("backup_mode all: %v, want both backups", seen)
				}
			}

			s["p1"].restart(t)
			s["p2"].restart(t)
			for _, n := range []string{"p1", "p2"} {
				waitBackend(t, rt, "db", n, 3*time.Second, "up", func(b plane.BackendStatus) bool { return b.Health == "up" })
			}
			if got := serving(rt); got != "primaries" {
				t.Fatalf("serving %q after the primaries came back, want primaries", got)
			}
			seen, after := namesFrom(t, vip, 12)
			if seen["k1"]+seen["k2"] > 0 {
				t.Fatalf("after failback new flows still reach the backups: %v", seen)
			}
			if tc.algorithm == "maglev" {
				for i := range before {
					if before[i] != after[i] {
						t.Errorf("client %d: %s before the failover, %s after the failback", i, before[i], after[i])
					}
				}
			}
			if _, err := held.Write([]byte("still there\n")); err != nil {
				t.Fatalf("a flow on a backup after failback: %v", err)
			}
			buf := make([]byte, 64)
			held.SetReadDeadline(time.Now().Add(2 * time.Second))
			if n, err := held.Read(buf); err != nil || string(buf[:n]) != "still there\n" {
				t.Fatalf("a flow on a backup after failback: %q, %v", buf[:n], err)
			}
		})
	}
}
