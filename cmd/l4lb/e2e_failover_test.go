// End-to-end tests of issue 28's failover parts with real clients:
// retry on an early reset (pgbench against a backend that resets what it
// accepted, or restarts with connections in its accept queue), sticky
// failover and on_backup_recovered (redis-benchmark across a primary's
// loss and return), the cap on passive ejections and panic mode.

package main

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// How a misbehaving backend drops the connections it got.
const (
	// resetsAccepted: it accepts each connection and closes it at once
	// with SO_LINGER 0 (a reset), reading nothing.
	resetsAccepted = "reset-accepted"
	// restartsListener: it listens without accepting and closes the
	// listener every 150 ms (the kernel resets every connection in its
	// accept queue), then listens again 20 ms later: a process that
	// restarts.
	restartsListener = "listener-restarts"
)

// startDropper runs a backend at addr in namespace ns that drops its
// connections as how says, until the test ends.
func startDropper(t *testing.T, ns *testutil.Netns, addr netip.AddrPort, how string) {
	t.Helper()
	listen := func() net.Listener {
		var ln net.Listener
		ns.MustDo(t, func() (err error) { ln, err = net.Listen("tcp4", addr.String()); return err })
		return ln
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); wg.Wait() })
	wg.Add(1)
	switch how {
	case resetsAccepted:
		ln := listen()
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}()
		go func() { <-done; ln.Close() }()
	case restartsListener:
		go func() {
			defer wg.Done()
			for {
				var ln net.Listener
				if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp4", addr.String()); return err }); err != nil {
					t.Errorf("dropper listen: %v", err)
					return
				}
				select {
				case <-done:
					ln.Close()
					return
				case <-time.After(150 * time.Millisecond):
				}
				ln.Close() // connections in the accept queue are reset
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
}

// TestPgbenchEarlyReset: pgbench -C (a new connection per transaction)
// through a VIP over a PostgreSQL server and a backend that drops what
// it gets after the handshake (resets each accepted connection, or
// restarts its listener with connections queued). TCP checks pass on the
// dropper (its kernel completes handshakes), so only the proxy can tell.
// pgbench sends its startup packet at once, so l4lb has written it to
// the dropper before the reset: retry_on_reset = "unanswered" (the
// packet kept and resent) loses nothing, every transaction is processed,
// and status counts the early resets, the connection log marks them; with
// "off" pgbench clients abort (the test can fail). Passive marks are off
// (max_fails = 0) so that the dropper stays in the rotation: about every
// other connection meets it (with them on, its first early reset takes it
// out until its next good check).
func TestPgbenchEarlyReset(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	testutil.RequireTool(t, "pgbench")
	pg := testutil.StartPostgres(t, testutil.PostgresOptions{Netns: tp.Backends[0], Addr: tp.BackendIP(0), User: "l4lb"})
	pgbenchInit(t, pg)
	dropAt := netip.AddrPortFrom(tp.BackendIP(1), pg.Addr.Port())
	for _, how := range []string{resetsAccepted, restartsListener} {
		t.Run(how, func(t *testing.T) {
			startDropper(t, tp.Backends[1], dropAt, how)
			for _, policy := range []string{"unanswered", "off"} {
				conf := newConf().vip("pg", fmt.Sprintf(":%d", pg.Addr.Port()), `algorithm = "round_robin"`, `connect_timeout = "500ms"`, `retries = 3`,
					fmt.Sprintf("retry_on_reset = %q", policy), `log_connections = true`).
					health(`type = "tcp"`, `interval = "300ms"`, `timeout = "300ms"`, `rise = 1`, `fall = 2`, `max_fails = 0`).
					at("pg0", pg.Addr).at("drop", dropAt).String()
				lb := startLB(t, tp, conf)
				lb.waitHealth(t, "pg", "pg0", "up")
				argv := []string{"pgbench", "-n", "-h", tp.VIP.String(), "-p", strconv.Itoa(int(pg.Addr.Port())), "-U", "postgres",
					"-S", "-C", "-c", "4", "-t", "50", "postgres"}
				out, _ := tp.Client.Command(argv...).CombinedOutput()
				r := parsePgbench(t, string(out))
				tcp := lb.vip(t, "pg").TCP
				early := uint64(0)
				if tcp != nil {
					early = tcp.EarlyResetRetries
				}
				logged := strings.Count(lb.log.String(), `"early_resets"`)
				switch policy {
				case "unanswered":
					if r.failed != 0 || r.aborted != 0 || r.processed != 200 || early < 20 || logged == 0 {
						t.Fatalf("%s: %d processed, %d failed, %d aborted; %d early resets retried, %d logged; want 200, 0, 0 and some retried:\n%s",
							policy, r.processed, r.failed, r.aborted, early, logged, r.out)
					}
				case "off":
					if r.aborted == 0 || early != 0 {
						t.Fatalf("%s: %d processed, %d aborted, %d early resets retried; want aborted clients (the test must be able to fail) and none retried:\n%s",
							policy, r.processed, r.aborted, early, r.out)
					}
				}
				t.Logf("%s: %d transactions processed, %d failed, %d clients aborted; %d early resets retried (%d connection lines say so)",
					policy, r.processed, r.failed, r.aborted, early, logged)
				lb.killAll(t)
			}
		})
	}
}

// redisBench runs redis-benchmark through the VIP and returns its output
// and whether it reported an error.
func redisBench(t *testing.T, tp *testutil.Topology, args ...string) (string, bool) {
	t.Helper()
	argv := append([]string{"redis-benchmark", "-h", tp.VIP.String(), "-p", "6379", "-q"}, args...)
	out, err := tp.Client.Command(argv...).CombinedOutput()
	return string(out), err != nil || regexp.MustCompile(`(?i)\berror`).MatchString(string(out))
}

// pingCalls is how many PINGs r has answered (redis-benchmark -t ping
// sends PING_INLINE and PING_MBULK, both counted as ping).
func pingCalls(t *testing.T, ns *testutil.Netns, r *testutil.Redis) int {
	return redisCalls(t, ns, r)["ping"][0]
}
