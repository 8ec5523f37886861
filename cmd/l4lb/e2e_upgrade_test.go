// End-to-end tests of `l4lb upgrade` and SIGUSR2: real processes in
// network namespaces, a new binary taking over the old one's sockets. This
// file: the command, its refusals and failures, XDP, backend state, a
// change of workers. What it hands over: e2e_upgrade_conns_test.go; the
// service around it (systemd, signals): e2e_upgrade_signals_test.go.

package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// upgrade runs `l4lb upgrade` against the admin socket.
func (p *lbProcess) upgrade(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return l4lbCmd(t, append([]string{"upgrade", "--socket", p.sock}, args...)...)
}

// upgradeOK upgrades and returns the new process's PID (tracked for the
// cleanup).
func (p *lbProcess) upgradeOK(t *testing.T, args ...string) (int, string) {
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

// upgradedPIDFromError reads the new PID from "the new l4lb (pid N)".
func upgradedPIDFromError(s string) int {
	_, rest, ok := strings.Cut(s, "the new l4lb (pid ")
	if !ok {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSuffix(strings.Fields(rest)[0], ")"))
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
	namedEchoes(t, tp)
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
	namedEchoes(t, tp)
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

	hangs := filepath.Join(t.TempDir(), "l4lb-hangs")
	if err := os.WriteFile(hangs, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = lb.upgrade(t, "--binary", hangs, "--timeout", "1s")
	if code != 1 || !strings.Contains(errOut, "did not answer in time") {
		t.Fatalf("upgrade to a binary that never gets ready: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("a binary that hangs: %s", strings.TrimSpace(errOut))
	if pid := upgradedPIDFromError(errOut); pid == 0 || !pidGone(pid) {
		t.Fatalf("the hanging new process (pid %d) was not stopped", pid)
	}
	stillServing("after a binary that hangs")

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
	if strings.Contains(lb.log.String(), "xdp program detached") {
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

var vipThree = newConf().vip("a", ":80", `protocol = "tcp"`).health(`type = "tcp"`, `interval = "10s"`, `max_fails = 1`).backends(3, 7000).String()

// TestUpgradeKeepsBackendState: an operator's disable and a backend that
// health took down stay so in the new process, before its own probes run.
func TestUpgradeKeepsBackendState(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	for i := range 2 { // be2 serves nothing: its first connect fails
		namedEcho(t, tp, i, 7000)
	}
	lb := startUpgradable(t, tp.LB, vipThree)
	backend := func(id string) plane.BackendStatus {
		t.Helper()
		for _, b := range lb.status(t).VIPs[0].Backends {
			if b.ID == id {
				return b
			}
		}
		t.Fatalf("no backend %s", id)
		return plane.BackendStatus{}
	}
	testutil.Eventually(t, 10*time.Second, "a connect to be2 to take it down", func() bool {
		if c, err := dialVIP(tp, 80); err == nil {
			c.Close()
		}
		return backend("be2").Health == "down"
	})
	if out, errOut, code := lb.run(t, "disable", "--reason", "maintenance", "a", "be0"); code != 0 {
		t.Fatalf("disable: %s%s", out, errOut)
	}
	pid, _ := lb.upgradeOK(t)
	if st := lb.status(t); st.Process.PID != pid {
		t.Fatalf("status from pid %d", st.Process.PID)
	}
	if b := backend("be0"); b.Override != "disable" || b.OverrideBy != "root: maintenance" {
		t.Fatalf("be0 after the upgrade: override %q by %q", b.Override, b.OverrideBy)
	}
	if b := backend("be2"); b.Health != "down" {
		t.Fatalf("be2 after the upgrade: health %q, want down (carried over)", b.Health)
	}
	if seen := backendsSeen(t, tp, 80, 12); seen["be1"] != 12 {
		t.Fatalf("new connections after the upgrade went to %v, want be1 only", seen)
	}
}

// TestUpgradeWorkersChange: an upgrade to fewer event loops keeps UDP
// flows answered (the kernel hashes over fewer sockets: many flows reach
// another loop than their session's and start a new one there), and back
// to more. A process that started with a single
// loop has a lone UDP socket, not a SO_REUSEPORT group: an upgrade of it
// to several loops is refused and it keeps serving.
func TestUpgradeWorkersChange(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	for i := range 3 {
		udpNamedEcho(t, tp, i, 5300)
	}
	withWorkers := func(n int) string {
		return strings.Replace(udpUpgradeVIP, "[global]\n", fmt.Sprintf("[global]\nworkers = %d\n", n), 1)
	}
	conns := make([]*net.UDPConn, 32)
	for i := range conns {
		tp.Client.MustDo(t, func() (err error) {
			conns[i], err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(tp.VIP, 53)))
			return err
		})
		t.Cleanup(func() { conns[i].Close() })
	}
	answered := func(when string) {
		t.Helper()
		buf := make([]byte, 512)
		for i, c := range conns {
			ok := false
			for try := 0; try < 5 && !ok; try++ { // a datagram that ends a session on another loop is dropped
				c.SetDeadline(time.Now().Add(150 * time.Millisecond))
				c.Write([]byte("ping"))
				_, err := c.Read(buf)
				ok = err == nil
			}
			if !ok {
				t.Fatalf("%s: flow %d gets no answer", when, i)
			}
		}
	}
	lb := startUpgradable(t, tp.LB, withWorkers(3))
	answered("3 loops")
	lb.writeConfig(t, withWorkers(2))
	pid, _ := lb.upgradeOK(t) // the kernel hashes over 2 sockets now: many flows change loops
	answered("after the upgrade to 2 loops")
	answered("again on 2 loops")
	lb.writeConfig(t, withWorkers(3))
	pid, _ = lb.upgradeOK(t) // the socket group came from a 3-loop process
	answered("after the upgrade back to 3 loops")
	syscall.Kill(pid, syscall.SIGTERM)
	waitGone(t, pid, 10*time.Second)

	lb = startUpgradable(t, tp.LB, withWorkers(1))
	answered("a fresh start on 1 loop")
	lb.writeConfig(t, withWorkers(2))
	out, errOut, code := lb.upgrade(t)
	if code != 1 || !strings.Contains(errOut, "udp socket 2 of 2") {
		t.Fatalf("upgrade from a fresh 1 loop to 2: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("%s", strings.TrimSpace(errOut))
	answered("after the refused upgrade")
}
