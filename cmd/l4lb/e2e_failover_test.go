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
	"github.com/l4lb/l4lb/l4/plane"
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
				if policy == "off" && !pgbenchProcessed.Match(out) {
					// pgbench's first connection (before the run) met the
					// dropper: it gives up with no report.
					if !strings.Contains(string(out), "error") {
						t.Fatalf("off: pgbench gave no report and no error:\n%s", out)
					}
					t.Logf("off: pgbench stopped before its run: %s", strings.TrimSpace(string(out)))
					lb.killAll(t)
					continue
				}
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
// and whether it reported an error. It is given 20 s (a few thousand
// requests take 1-2 s here): one that cannot reach a backend reconnects
// without end, and counts as failed when the time is up.
func redisBench(t *testing.T, tp *testutil.Topology, args ...string) (string, bool) {
	t.Helper()
	// Bounded: a benchmark that cannot connect must not hang the test.
	argv := append([]string{"timeout", "20", "redis-benchmark", "-h", tp.VIP.String(), "-p", "6379", "-q"}, args...)
	out, err := tp.Client.Command(argv...).CombinedOutput()
	return string(out), err != nil || regexp.MustCompile(`(?i)\berror`).MatchString(string(out))
}

// backupConf is VIP redis over primary r0 and backup r1 with redis checks
// every 200 ms, and keys for the VIP.
func backupConf(r0, r1 netip.AddrPort, keys ...string) string {
	return newConf().vip("redis", ":6379", append([]string{`connect_timeout = "500ms"`}, keys...)...).
		health(`type = "redis"`, `interval = "200ms"`, `timeout = "200ms"`, `rise = 1`, `fall = 1`).
		at("r0", r0).at("r1", r1, `backup = true`).String()
}

// setsOn runs redis-benchmark's SETs through the VIP and returns how many
// each server took (health checks send PING only), failing on any error.
func setsOn(t *testing.T, tp *testutil.Topology, rs [2]*testutil.Redis, n int) [2]int {
	t.Helper()
	var before [2]int
	for i, r := range rs {
		before[i] = serverSETs(tp.Backends[i], r)
	}
	if out, bad := redisBench(t, tp, "-t", "set", "-n", strconv.Itoa(n), "-c", "4"); bad {
		t.Fatalf("redis-benchmark failed:\n%s", out)
	}
	var got [2]int
	for i, r := range rs {
		got[i] = serverSETs(tp.Backends[i], r) - before[i]
	}
	return got
}

// serverSETs is how many SETs r answered; 0 when it is stopped.
func serverSETs(ns *testutil.Netns, r *testutil.Redis) int {
	out, err := ns.Command("redis-cli", "-h", r.Addr.Addr().String(), "-p", strconv.Itoa(int(r.Addr.Port())), "INFO", "commandstats").Output()
	if err != nil {
		return 0
	}
	for _, m := range cmdstat.FindAllStringSubmatch(string(out), -1) {
		if m[1] == "set" {
			n, _ := strconv.Atoi(m[2])
			return n
		}
	}
	return 0
}

// TestRedisStickyFailover: a primary r0 and a backup r1; r0 is stopped
// and new flows go to r1; r0 comes back. With backup_mode = "sticky" the
// VIP stays on r1 (every SET of redis-benchmark lands there, status
// serving "backups"), until r1 fails: then r0 serves. With "first" (the
// preemptive default) the SETs go back to r0 at once: the test can fail.
// redis-benchmark reports no error in any run.
func TestRedisStickyFailover(t *testing.T) {
	testutil.RequireTool(t, "redis-benchmark", "redis-cli")
	for _, mode := range []string{"sticky", "first"} {
		t.Run(mode, func(t *testing.T) {
			tp := testutil.NewTopology(t, 2)
			var rs [2]*testutil.Redis
			for i := range rs {
				rs[i] = testutil.StartRedisIn(t, tp.Backends[i], tp.BackendIP(i).String()+":6379", "")
			}
			lb := startLB(t, tp, backupConf(rs[0].Addr, rs[1].Addr, fmt.Sprintf("backup_mode = %q", mode)))
			lb.waitHealth(t, "redis", "r0", "up")
			lb.waitHealth(t, "redis", "r1", "up")
			const n = 2000
			if got := setsOn(t, tp, rs, n); got != [2]int{n, 0} {
				t.Fatalf("before the failover: SETs per server %v, want all on r0", got)
			}
			rs[0].Stop()
			lb.waitStatus(t, 5*time.Second, "backups serving", func(st plane.Status) bool { return vipNamed(st, "redis").Serving == "backups" })
			if got := setsOn(t, tp, rs, n); got != [2]int{0, n} {
				t.Fatalf("r0 stopped: SETs per server %v, want all on r1", got)
			}
			rs[0] = testutil.StartRedisIn(t, tp.Backends[0], rs[0].Addr.String(), "")
			lb.waitHealth(t, "redis", "r0", "up")
			got := setsOn(t, tp, rs, n)
			serving := lb.vip(t, "redis").Serving
			if mode == "first" {
				if got != [2]int{n, 0} || serving != "primaries" {
					t.Fatalf("first: r0 back: SETs per server %v, serving %q; want all on r0 (preemptive)", got, serving)
				}
				return
			}
			if got != [2]int{0, n} || serving != "backups" {
				t.Fatalf("sticky: r0 back: SETs per server %v, serving %q; want all still on r1", got, serving)
			}
			rs[1].Stop()
			lb.waitStatus(t, 5*time.Second, "r0 serving again", func(st plane.Status) bool { return vipNamed(st, "redis").Serving == "primaries" })
			if got := setsOn(t, tp, rs, n); got != [2]int{n, 0} {
				t.Fatalf("sticky: r1 stopped: SETs per server %v, want all on r0", got)
			}
			t.Logf("sticky: stayed on the backup after the primary came back; moved to the primary only when the backup failed")
		})
	}
}

// redisSession is a connection through the VIP from the client
// namespace, kept open.
func redisSession(t *testing.T, tp *testutil.Topology) net.Conn {
	t.Helper()
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp4", tp.VIP.String()+":6379", 2*time.Second)
		return err
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// ping sends PING on c and reads the answer.
func ping(c net.Conn) error {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	b := make([]byte, 7)
	n, err := c.Read(b)
	if err == nil && string(b[:n]) != "+PONG\r\n" {
		err = fmt.Errorf("answer %q", b[:n])
	}
	return err
}

// TestRedisBackupRecovered: sessions opened on the backup while the
// primary was down. When the primary comes back, on_backup_recovered =
// "close" resets them (counted in status failover.backup_closes; the
// client can reconnect to the primary), "keep" leaves them working
// (the test can fail). redis-benchmark before and after loses nothing.
func TestRedisBackupRecovered(t *testing.T) {
	testutil.RequireTool(t, "redis-benchmark", "redis-cli")
	for _, how := range []string{"close", "keep"} {
		t.Run(how, func(t *testing.T) {
			tp := testutil.NewTopology(t, 2)
			var rs [2]*testutil.Redis
			for i := range rs {
				rs[i] = testutil.StartRedisIn(t, tp.Backends[i], tp.BackendIP(i).String()+":6379", "")
			}
			lb := startLB(t, tp, backupConf(rs[0].Addr, rs[1].Addr, fmt.Sprintf("on_backup_recovered = %q", how), `log_connections = true`))
			lb.waitHealth(t, "redis", "r0", "up")
			rs[0].Stop()
			lb.waitStatus(t, 5*time.Second, "backups serving", func(st plane.Status) bool { return vipNamed(st, "redis").Serving == "backups" })
			if got := setsOn(t, tp, rs, 1000); got != [2]int{0, 1000} {
				t.Fatalf("r0 stopped: SETs per server %v, want all on r1", got)
			}
			var sessions []net.Conn
			for range 3 {
				c := redisSession(t, tp)
				if err := ping(c); err != nil {
					t.Fatalf("session on the backup: %v", err)
				}
				sessions = append(sessions, c)
			}
			rs[0] = testutil.StartRedisIn(t, tp.Backends[0], rs[0].Addr.String(), "")
			lb.waitStatus(t, 5*time.Second, "primaries serving", func(st plane.Status) bool { return vipNamed(st, "redis").Serving == "primaries" })
			time.Sleep(300 * time.Millisecond) // the close runs after the switch
			alive := 0
			for _, c := range sessions {
				if ping(c) == nil {
					alive++
				}
			}
			closes := uint64(0)
			if f := lb.vip(t, "redis").Failover; f != nil {
				closes = f.BackupCloses
			}
			switch how {
			case "close":
				if alive != 0 || closes < 3 || !strings.Contains(lb.log.String(), `"end": "primary_back"`) {
					t.Fatalf("close: %d of 3 sessions on the backup still answer, %d closed (status); want 0 and 3 (end primary_back logged)", alive, closes)
				}
			case "keep":
				if alive != 3 || closes != 0 {
					t.Fatalf("keep: %d of 3 sessions on the backup answer, %d closed; want 3 and 0", alive, closes)
				}
			}
			if got := setsOn(t, tp, rs, 1000); got != [2]int{1000, 0} {
				t.Fatalf("r0 back: SETs per server %v, want all on r0", got)
			}
			t.Logf("%s: %d of 3 backup sessions alive after the primary came back, %d closed", how, alive, closes)
		})
	}
}

// TestRedisOutlierCap: four backends, two of them dead (connects
// refused), health type none (passive marks only). redis-benchmark runs
// through the VIP with no error (refused connects are retried). With
// max_ejected = 25 (one of four) passive marks take one dead backend
// out and the second is kept in (status eject_kept, failover
// ejections_capped); with 100 both go out (the test can fail).
func TestRedisOutlierCap(t *testing.T) {
	testutil.RequireTool(t, "redis-benchmark", "redis-cli")
	for _, pct := range []int{25, 100} {
		t.Run(strconv.Itoa(pct), func(t *testing.T) {
			tp := testutil.NewTopology(t, 4)
			var rs [2]*testutil.Redis
			for i := range rs {
				rs[i] = testutil.StartRedisIn(t, tp.Backends[i], tp.BackendIP(i).String()+":6379", "")
			}
			conf := newConf().vip("redis", ":6379", `connect_timeout = "500ms"`, `retries = 3`).
				health(`type = "none"`, `max_fails = 1`, `fail_timeout = "60s"`, fmt.Sprintf("max_ejected = %d", pct)).
				at("r0", rs[0].Addr).at("r1", rs[1].Addr).
				at("d2", netip.AddrPortFrom(tp.BackendIP(2), 6379)).at("d3", netip.AddrPortFrom(tp.BackendIP(3), 6379)).String()
			lb := startLB(t, tp, conf)
			lb.waitHealth(t, "redis", "r0", "unknown")
			if out, bad := redisBench(t, tp, "-t", "set,get", "-n", "2000", "-c", "4"); bad {
				t.Fatalf("redis-benchmark failed:\n%s", out)
			}
			v := lb.vip(t, "redis")
			out, kept := 0, 0
			for _, id := range []string{"d2", "d3"} {
				b := backendOf(lb.status(t), "redis", id)
				if b.Health != "down" {
					t.Fatalf("%s: health %q, want down (passive marks)", id, b.Health)
				}
				if b.EjectKept {
					kept++
				} else {
					out++
				}
			}
			capped := uint64(0)
			if v.Failover != nil {
				capped = v.Failover.EjectionsCapped
			}
			want := [2]int{1, 1}
			if pct == 100 {
				want = [2]int{2, 0}
			}
			if [2]int{out, kept} != want || (kept > 0) != (capped > 0) {
				t.Fatalf("max_ejected %d: %d dead backends out, %d kept in, %d marks capped; want %v", pct, out, kept, capped, want)
			}
			if kept > 0 && !strings.Contains(lb.statusText(t), "KEPT") {
				t.Fatalf("status text does not show the kept backend:\n%s", lb.statusText(t))
			}
			t.Logf("max_ejected %d: %d out, %d kept in (%d marks capped); redis-benchmark 0 errors", pct, out, kept, capped)
		})
	}
}

// TestRedisPanicMode: a broken check (port 1, where nothing listens)
// takes both servers down. With panic_mode the VIP serves them anyway
// (status serving "panic", failover panics 1, an error logged) and
// redis-benchmark runs without error; without it the VIP has no backend
// and redis-benchmark fails (the test can fail).
func TestRedisPanicMode(t *testing.T) {
	testutil.RequireTool(t, "redis-benchmark", "redis-cli")
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("panic_mode=%v", on), func(t *testing.T) {
			tp := testutil.NewTopology(t, 2)
			var rs [2]*testutil.Redis
			for i := range rs {
				rs[i] = testutil.StartRedisIn(t, tp.Backends[i], tp.BackendIP(i).String()+":6379", "")
			}
			conf := newConf().vip("redis", ":6379", `connect_timeout = "500ms"`).
				health(`type = "redis"`, `port = 1`, `interval = "200ms"`, `timeout = "200ms"`, `fall = 1`, fmt.Sprintf("panic_mode = %v", on)).
				at("r0", rs[0].Addr).at("r1", rs[1].Addr).String()
			lb := startLB(t, tp, conf)
			lb.waitHealth(t, "redis", "r0", "down")
			lb.waitHealth(t, "redis", "r1", "down")
			out, bad := redisBench(t, tp, "-t", "set,get", "-n", "2000", "-c", "4")
			v := lb.vip(t, "redis")
			if !on {
				if !bad || v.Serving == "panic" {
					t.Fatalf("panic_mode off: redis-benchmark succeeded or serving %q; want no backend:\n%s", v.Serving, out)
				}
				return
			}
			panics := uint64(0)
			if v.Failover != nil {
				panics = v.Failover.Panics
			}
			if bad || v.Serving != "panic" || panics != 1 || !strings.Contains(lb.log.String(), "PANIC") || !strings.Contains(lb.statusText(t), "PANIC") {
				t.Fatalf("panic_mode on: serving %q, panics %d, redis-benchmark:\n%s", v.Serving, panics, out)
			}
			t.Logf("panic_mode: both servers down by a broken check, serving %q; redis-benchmark 0 errors", v.Serving)
		})
	}
}
