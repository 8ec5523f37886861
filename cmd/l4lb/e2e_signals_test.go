// End-to-end tests of the daemon's lifecycle: signals in bursts during a
// slow reload, status while a stop drains, and a second l4lb that clashes
// only on the admin socket.

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// slowReloadVIP resolves backend names at a DNS server in the balancer's
// namespace. With the server silent, a reload that adds a name waits
// about 3 s for its first answer (reconcile's firstAnswerWait): a slow
// reload made of real parts, during which the test sends its signals.
func slowReloadConf() *conf {
	return newConf(`drain_timeout = "3s"`, `resolvers = ["198.18.1.1"]`).vip("a", ":80").backends(1, 7000)
}

// startSlowReload starts l4lb with slowReloadVIP and a silent DNS
// server, writes a config that adds a named backend, sends the SIGHUP
// that starts the slow reload and returns once that reload waits for DNS.
func startSlowReload(t *testing.T) *lbProcess {
	t.Helper()
	tp := testutil.NewTopology(t, 1)
	namedEcho(t, tp, 0, 7000)
	dns := testutil.StartDNSServer(t, tp.LB, "198.18.1.1:53")
	dns.SetSilent(true)
	lb := startLB(t, tp, slowReloadConf().String())
	lb.writeConfig(t, slowReloadConf().backend(`name = "slow"`, `address = "slow.db.test:7000"`).String())
	lb.signal(t, syscall.SIGHUP)
	testutil.Eventually(t, 10*time.Second, "the reload to ask DNS for the new name", func() bool { return dns.Queries() > 0 })
	return lb
}

// burst sends sig n times, a few milliseconds apart: each is a signal of
// its own for the daemon (the kernel and Go's runtime merge only those
// that arrive before the last one was taken).
func burst(t *testing.T, lb *lbProcess, sig syscall.Signal, n int) {
	t.Helper()
	for range n {
		lb.signal(t, sig)
		time.Sleep(2 * time.Millisecond)
	}
}

// TestStopNotLostBehindReloads: six SIGHUPs then a SIGTERM, all while a
// slow reload runs. The stop is never dropped behind the reloads: once
// the running reload ends, l4lb stops (the waiting reload is not run
// first: a stop outranks it).
func TestStopNotLostBehindReloads(t *testing.T) {
	lb := startSlowReload(t)
	burst(t, lb, syscall.SIGHUP, 6)
	sent := time.Now()
	lb.signal(t, syscall.SIGTERM)
	lb.waitExit(t, 30*time.Second, "SIGTERM sent behind six SIGHUPs")
	log := lb.log.String()
	reloads := strings.Count(log, "reload applied")
	t.Logf("exited %v after the SIGTERM, %d reloads applied", time.Since(sent).Round(time.Millisecond), reloads)
	if !strings.Contains(log, "shutting down") {
		t.Error("no shutdown logged")
	}
	// The slow one; a second only if the machine was so slow that the
	// SIGTERM came after it ended.
	if reloads < 1 || reloads > 2 {
		t.Errorf("%d reloads applied, want the running one and at most one more", reloads)
	}
}

// TestReloadsCoalesce: 50 SIGHUPs during a slow reload make one more
// reload after it, not 50 (nor as many as a queue holds).
func TestReloadsCoalesce(t *testing.T) {
	lb := startSlowReload(t)
	burst(t, lb, syscall.SIGHUP, 50)
	lb.waitLogN(t, "reload applied", 2)
	// Nothing else may be waiting: a stop taken now runs after any
	// reload still queued before it (SIGTERM arrived after them).
	lb.signal(t, syscall.SIGTERM)
	lb.waitExit(t, 30*time.Second, "SIGTERM")
	if n := strings.Count(lb.log.String(), "reload applied"); n != 2 {
		t.Fatalf("%d reloads applied for a slow one and 50 SIGHUPs during it, want 2", n)
	}
}

// TestStatusDuringStop: while a SIGTERM drains, status lists the VIPs
// that drain, with their live connections, and says l4lb is stopping.
func TestStatusDuringStop(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startLB(t, tp, strings.Replace(vipA, `drain_timeout = "3s"`, `drain_timeout = "60s"`, 1))
	c := mustDialVIP(t, tp, 80)
	lb.signal(t, syscall.SIGTERM)
	lb.waitLog(t, "shutting down")
	testutil.Eventually(t, 10*time.Second, "status to list VIP a as draining", func() bool {
		v := vipNamed(lb.status(t), "a")
		return v.Draining
	})
	st := lb.status(t)
	if v := vipNamed(st, "a"); !st.Stopping || v.Active != 1 || len(v.Backends) != 2 {
		t.Errorf("status during the stop: stopping %v, VIP a %+v; want stopping, 1 active connection, its 2 backends", st.Stopping, v)
	}
	out, errOut, code := lb.run(t, "status")
	if code != 0 || !strings.Contains(out, "STOPPING") || !strings.Contains(out, "VIP a ") ||
		!strings.Contains(out, "active 1 ") || !strings.Contains(out, "DRAINING (l4lb is stopping)") {
		t.Errorf("l4lb status during the stop: exit %d\n%s%s", code, out, errOut)
	}
	if err := c.echo("during the drain"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	lb.waitExit(t, 10*time.Second, "its last connection closed")
}

// TestAdminSocketClashFailsFast: a second l4lb whose only clash with the
// running one is the admin socket fails at once, saying so, before it
// starts any VIP or health probe; the first one goes on serving.
func TestAdminSocketClashFailsFast(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startLB(t, tp, vipA)
	second := strings.NewReplacer("@ADMIN@", lb.sock, "198.18.2.10:80", "198.18.2.10:81").Replace(vipA) +
		"  [vip.health]\n  interval = \"200ms\"\n  timeout = \"100ms\"\n"
	path := filepath.Join(t.TempDir(), "second.toml")
	if err := os.WriteFile(path, []byte(second), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := tp.LB.Command(mustBin(t), "run", "--config", path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if exitCode(err) != 1 {
			t.Errorf("second l4lb: %v, want exit status 1", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("second l4lb still runs 30s after it started:\n%s", out.String())
	}
	log := out.String()
	if !strings.Contains(log, "admin socket "+lb.sock+": another l4lb is serving it") {
		t.Errorf("second l4lb does not say the admin socket is taken:\n%s", log)
	}
	if strings.Contains(log, "vip started") || strings.Contains(log, "event loops") {
		t.Errorf("second l4lb started VIPs before it found the admin socket taken:\n%s", log)
	}
	if st := lb.status(t); st.Process.PID != lb.cmd.Process.Pid || len(st.VIPs) != 1 {
		t.Errorf("the first l4lb after the clash: pid %d, %d VIPs", st.Process.PID, len(st.VIPs))
	}
	if c, err := dialVIP(tp, 80); err != nil {
		t.Errorf("the first l4lb after the clash: %v", err)
	} else {
		c.Close()
	}
}
