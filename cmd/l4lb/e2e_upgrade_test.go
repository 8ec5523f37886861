// End-to-end tests of `l4lb upgrade` and SIGUSR2: real processes in
// network namespaces, a new binary taking over the old one's sockets.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// upLB is an l4lb that may be upgraded: it and every process it hands
// over to log into one file (a pipe would keep the first one's Wait
// waiting for the last one), and the test kills them all at the end.
type upLB struct {
	cfg, sock, logPath string
	cmd                *exec.Cmd
	exited             chan struct{}
	mu                 sync.Mutex
	pids               []int // every l4lb of this test, for the cleanup
}

func startUpgradable(t *testing.T, ns *testutil.Netns, config string) *upLB {
	t.Helper()
	dir := t.TempDir()
	p := &upLB{cfg: filepath.Join(dir, "l4lb.toml"), sock: filepath.Join(dir, "admin.sock"), logPath: filepath.Join(dir, "l4lb.log"), exited: make(chan struct{})}
	p.writeConfig(t, config)
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = ns.Command(mustBin(t), "run", "--config", p.cfg)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	err = p.cmd.Start()
	logf.Close()
	if err != nil {
		t.Fatal(err)
	}
	p.track(p.cmd.Process.Pid)
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		log := p.log(t)
		if strings.Contains(log, "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in l4lb")
		}
		if t.Failed() {
			t.Logf("l4lb log:\n%s", log)
		}
		p.killAll(t)
	})
	p.waitLog(t, "l4lb running")
	return p
}

func (p *upLB) writeConfig(t *testing.T, config string) {
	t.Helper()
	if err := os.WriteFile(p.cfg, []byte(strings.ReplaceAll(config, "@ADMIN@", p.sock)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (p *upLB) track(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pids = append(p.pids, pid)
}

// killAll kills, by PID, every l4lb of this test still running.
func (p *upLB) killAll(t *testing.T) {
	p.mu.Lock()
	pids := append([]int(nil), p.pids...)
	p.mu.Unlock()
	for _, pid := range pids {
		if !pidGone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, pid := range pids {
		deadline := time.Now().Add(5 * time.Second)
		for !pidGone(pid) {
			if time.Now().After(deadline) {
				t.Errorf("l4lb pid %d did not exit after SIGKILL", pid)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// pidGone reports whether process pid has exited (or is a zombie).
func pidGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// waitGone waits up to d for pid to exit and returns how long it took.
func waitGone(t *testing.T, pid int, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !pidGone(pid) {
		if time.Since(start) > d {
			t.Fatalf("pid %d still running after %v", pid, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func (p *upLB) log(t *testing.T) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Errorf("reading the l4lb log: %v", err)
	}
	return string(data)
}

func (p *upLB) waitLogN(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(p.log(t), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("l4lb never logged %q (%d times)", s, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *upLB) waitLog(t *testing.T, s string) { t.Helper(); p.waitLogN(t, s, 1) }

// status asks whichever l4lb serves the admin socket now.
func (p *upLB) status(t *testing.T) reconcile.Status {
	t.Helper()
	out, err := exec.Command(mustBin(t), "status", "--json", "--socket", p.sock).Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var st reconcile.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// upgrade runs `l4lb upgrade` against the admin socket.
func (p *upLB) upgrade(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return l4lbCmd(t, append([]string{"upgrade", "--socket", p.sock}, args...)...)
}

// upgradeOK upgrades and returns the new process's PID (tracked for the
// cleanup).
func (p *upLB) upgradeOK(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, errOut, code := p.upgrade(t, args...)
	pid := upgradedPID(out)
	if pid > 0 {
		p.track(pid)
	}
	if code != 0 || pid == 0 {
		t.Fatalf("l4lb upgrade: exit %d\n%s%s", code, out, errOut)
	}
	return pid, out
}

// upgradedPID reads the new PID from `upgraded: pid A -> B`.
func upgradedPID(out string) int {
	i := strings.Index(out, "-> ")
	if !strings.HasPrefix(out, "upgraded: pid ") || i < 0 {
		return 0
	}
	f := strings.Fields(out[i+3:])
	if len(f) == 0 {
		return 0
	}
	pid, _ := strconv.Atoi(f[0])
	return pid
}

// dialLoop has workers clients open, use and close connections through the
// VIP until stopped, counting every failure.
type dialLoop struct {
	dials, failures atomic.Int64
	stop            chan struct{}
	stopOnce        sync.Once
	wg              sync.WaitGroup
	mu              sync.Mutex
	errs            []string
}

func startDialLoop(t *testing.T, tp *testutil.Topology, port, workers int) *dialLoop {
	d := &dialLoop{stop: make(chan struct{})}
	for w := range workers {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-d.stop:
					return
				default:
				}
				err := func() error {
					c, err := dialVIPWithin(tp, port, 5*time.Second)
					if err != nil {
						return err
					}
					defer c.Close()
					return c.echo(fmt.Sprintf("worker %d dial %d", w, i))
				}()
				d.dials.Add(1)
				if err != nil {
					d.failures.Add(1)
					d.mu.Lock()
					d.errs = append(d.errs, err.Error())
					d.mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(func() { d.halt() })
	return d
}

func (d *dialLoop) halt() {
	d.stopOnce.Do(func() { close(d.stop) })
	d.wg.Wait()
}

// end stops the clients and fails the test if any dial failed.
func (d *dialLoop) end(t *testing.T) {
	t.Helper()
	d.halt()
	if f := d.failures.Load(); f > 0 {
		d.mu.Lock()
		defer d.mu.Unlock()
		t.Fatalf("%d of %d connections failed during the upgrade; first: %v", f, d.dials.Load(), d.errs[:min(len(d.errs), 5)])
	}
}

// TestUpgradeKeepsAccepting: clients connect without pause through an
// upgrade by `l4lb upgrade` and one by SIGUSR2; none is refused or reset,
// the admin socket answers from the new process, the old ones exit.
func TestUpgradeKeepsAccepting(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	for i := range 2 {
		namedEcho(t, tp, i, 7000)
	}
	lb := startUpgradable(t, tp.LB, vipA)
	oldPID := lb.cmd.Process.Pid
	dl := startDialLoop(t, tp, 80, 4)
	time.Sleep(300 * time.Millisecond)

	before := dl.dials.Load()
	start := time.Now()
	pid1, out := lb.upgradeOK(t)
	t.Logf("%s(took %v)", out, time.Since(start))
	if pid1 == oldPID {
		t.Fatalf("upgrade reported the old pid %d", pid1)
	}
	select {
	case <-lb.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the old l4lb did not exit after the upgrade")
	}
	if st := lb.status(t); st.Process.PID != pid1 {
		t.Fatalf("the admin socket answers from pid %d, want the new %d", st.Process.PID, pid1)
	}
	time.Sleep(300 * time.Millisecond)

	// SIGUSR2 to the new process: the same, once more.
	if err := syscall.Kill(pid1, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	var pid2 int
	testutil.Eventually(t, 20*time.Second, "a third l4lb to answer the admin socket", func() bool {
		pid2 = lb.status(t).Process.PID
		return pid2 != pid1
	})
	lb.track(pid2)
	waitGone(t, pid1, 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	dl.end(t)
	during := dl.dials.Load() - before
	t.Logf("%d connections through two upgrades (pids %d -> %d -> %d), 0 failed", during, oldPID, pid1, pid2)
	if during < 50 {
		t.Fatalf("only %d connections during the upgrades", during)
	}
	if st := lb.status(t); len(st.VIPs) != 1 || st.VIPs[0].Accepted == 0 {
		t.Fatalf("status after two upgrades: %+v", st.VIPs)
	}
}

// TestUpgradeFailureKeepsOld: a new binary that exits at once, a config
// the new process refuses, and a missing binary each leave the old l4lb
// serving, and `l4lb upgrade` says why and exits 1.
func TestUpgradeFailureKeepsOld(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	for i := range 2 {
		namedEcho(t, tp, i, 7000)
	}
	lb := startUpgradable(t, tp.LB, vipA)
	oldPID := lb.cmd.Process.Pid
	held := mustDialVIP(t, tp, 80)
	dl := startDialLoop(t, tp, 80, 2)
	stillServing := func(when string) {
		t.Helper()
		if err := held.echo("still here " + when); err != nil {
			t.Fatalf("%s: the established connection: %v", when, err)
		}
		if c, err := dialVIP(tp, 80); err != nil {
			t.Fatalf("%s: a new connection: %v", when, err)
		} else {
			c.Close()
		}
		if pid := lb.status(t).Process.PID; pid != oldPID {
			t.Fatalf("%s: the admin socket answers from pid %d, want %d", when, pid, oldPID)
		}
	}

	broken := filepath.Join(t.TempDir(), "l4lb-broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'l4lb-broken: this build cannot start' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := lb.upgrade(t, "--binary", broken)
	if code != 1 || !strings.Contains(errOut, "keeps serving") || !strings.Contains(errOut, "exit status 1") {
		t.Fatalf("upgrade to a binary that exits: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("a binary that exits: %s", strings.TrimSpace(errOut))
	stillServing("after a binary that exits")

	lb.writeConfig(t, strings.Replace(vipA, `listen = "198.18.2.10:80"`, `listen = "198.18.2.10:nonsense"`, 1))
	out, errOut, code = lb.upgrade(t)
	if code != 1 || !strings.Contains(errOut, "refused to start") || !strings.Contains(errOut, "l4lb.toml:") {
		t.Fatalf("upgrade with a config the new process refuses: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("a config refused: %s", strings.TrimSpace(errOut))
	stillServing("after a refused config")
	lb.writeConfig(t, vipA)

	out, errOut, code = lb.upgrade(t, "--binary", "/nonexistent/l4lb")
	if code != 1 || !strings.Contains(errOut, "no such file") {
		t.Fatalf("upgrade to a missing binary: exit %d\n%s%s", code, out, errOut)
	}
	stillServing("after a missing binary")
	dl.end(t)

	// And then a good upgrade still works, with the established
	// connection carried over or drained.
	if _, out := lb.upgradeOK(t); !strings.Contains(out, "upgraded") {
		t.Fatal(out)
	}
}

// TestUpgradeXDPKeepsForwarding: with pin_path, xdp flows keep forwarding
// through the pinned maps while a new l4lb takes over (the old one never
// detaches the program), and new flows work all the while. Without
// pin_path the upgrade is refused and the old l4lb keeps serving.
func TestUpgradeXDPKeepsForwarding(t *testing.T) {
	n := newXDPNet(t, 3)
	pins := mountBPF(t)
	lb := startUpgradable(t, n.LB.NS, n.config(fmt.Sprintf("pin_path = %q", pins), "", 0, 1, 2))
	c, r, first := n.askTCPConn(t, n.vip4)
	echo(t, c, r, []byte("before the upgrade"))

	var asks, fails atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			asks.Add(1)
			if _, err := tryAsk(n.DSR, n.vip4); err != nil {
				fails.Add(1)
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	pid, out := lb.upgradeOK(t)
	t.Logf("%s", out)
	lb.waitLog(t, "adopted the maps pinned by an earlier l4lb")
	select {
	case <-lb.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the old l4lb did not exit")
	}
	echo(t, c, r, []byte("after the upgrade, still on "+first))
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done
	if fails.Load() > 0 || asks.Load() < 20 {
		t.Fatalf("%d of %d new xdp flows failed during the upgrade", fails.Load(), asks.Load())
	}
	t.Logf("%d new xdp flows during the upgrade, none failed", asks.Load())
	if strings.Contains(lb.log(t), "xdp program detached") {
		t.Fatal("the old l4lb detached the program")
	}

	// For good: stop the new one, then take the program off.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid, 10*time.Second)
	if out, err := n.LB.NS.Command(mustBin(t), "xdp", "detach", lb.cfg).CombinedOutput(); err != nil {
		t.Fatalf("xdp detach: %v\n%s", err, out)
	}
}

// TestUpgradeXDPWithoutPinRefused: without pin_path the program's link
// belongs to the running process; the upgrade is refused before any new
// process starts, and the old one keeps forwarding.
func TestUpgradeXDPWithoutPinRefused(t *testing.T) {
	n := newXDPNet(t, 2)
	lb := startUpgradable(t, n.LB.NS, n.config("", "", 0, 1))
	c, r, _ := n.askTCPConn(t, n.vip4)
	out, errOut, code := lb.upgrade(t)
	if code != 1 || !strings.Contains(errOut, "pin_path") {
		t.Fatalf("upgrade without pin_path: exit %d\n%s%s", code, out, errOut)
	}
	echo(t, c, r, []byte("still forwarded"))
	if pid := lb.status(t).Process.PID; pid != lb.cmd.Process.Pid {
		t.Fatalf("admin socket answered by pid %d", pid)
	}
}
