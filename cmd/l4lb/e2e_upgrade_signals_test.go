// End-to-end tests of the service around an upgrade: systemd follows the
// new process, and the stops and reloads the old one gets during and
// after the handover reach the one that serves.

package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

// notifyListener plays systemd's notify socket, and tells who sent what
// (SO_PASSCRED), as systemd checks against the main PID.
type notifyListener struct {
	c    *net.UnixConn
	path string
}

type notifyMsg struct {
	pid  int
	text string
}

func listenNotify(t *testing.T) *notifyListener {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	raw, _ := c.SyscallConn()
	raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) })
	return &notifyListener{c: c, path: path}
}

// next returns the next message, or ok = false after wait.
func (n *notifyListener) next(t *testing.T, wait time.Duration) (notifyMsg, bool) {
	t.Helper()
	buf, oob := make([]byte, 1024), make([]byte, 256)
	n.c.SetReadDeadline(time.Now().Add(wait))
	k, oobn, _, _, err := n.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return notifyMsg{}, false
	}
	m := notifyMsg{text: string(buf[:k])}
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			if cred, err := unix.ParseUnixCredentials(&msgs[i]); err == nil {
				m.pid = int(cred.Pid)
			}
		}
	}
	return m, true
}

// TestUpgradeNotifiesServiceManager: under Type=notify the old process
// (still the main one) names the new one MAINPID, the new one then says
// READY=1 as main, and nobody says STOPPING=1: systemd follows the new
// process and never thinks the service stops.
func TestUpgradeNotifiesServiceManager(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	namedEcho(t, tp, 0, 7000)
	nl := listenNotify(t)
	lb := startUpgradable(t, tp.LB, vipA, "NOTIFY_SOCKET="+nl.path)
	oldPID := lb.cmd.Process.Pid
	if m, ok := nl.next(t, 10*time.Second); !ok || !strings.HasPrefix(m.text, "READY=1") || m.pid != oldPID {
		t.Fatalf("at start: %+v, want READY=1 from %d", m, oldPID)
	}
	newPID, _ := lb.upgradeOK(t)
	want := []struct {
		from int
		text string
	}{
		{oldPID, fmt.Sprintf("MAINPID=%d", newPID)},
		{newPID, fmt.Sprintf("MAINPID=%d\nREADY=1", newPID)},
	}
	for _, w := range want {
		m, ok := nl.next(t, 10*time.Second)
		if !ok || m.pid != w.from || !strings.HasPrefix(m.text, w.text) {
			t.Fatalf("got %+v, want %q from pid %d", m, w.text, w.from)
		}
	}
	<-lb.exited
	if m, ok := nl.next(t, 500*time.Millisecond); ok {
		t.Fatalf("after the upgrade: %+v, want nothing (above all no STOPPING=1)", m)
	}
	syscall.Kill(newPID, syscall.SIGTERM)
	if m, ok := nl.next(t, 10*time.Second); !ok || m.pid != newPID || m.text != "STOPPING=1" {
		t.Fatalf("on SIGTERM to the new process: %+v, want STOPPING=1 from %d", m, newPID)
	}
}

// The shipped unit lets systemd follow an upgrade: the new process may
// notify, SIGHUP reloads stay, and a stop does not strand an old process.
func TestSystemdUnitFollowsUpgrades(t *testing.T) {
	data, err := os.ReadFile("../../scripts/l4lb.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(data)
	for _, want := range []string{"\nType=notify\n", "\nNotifyAccess=all\n", "\nExecReload=/bin/kill -HUP $MAINPID\n", "\nKillMode=mixed\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
}

// dnsUpgradeVIP has a backend named in DNS: with the DNS server silent, a
// new process waits about 2 s for the name's first answer before it opens
// its VIPs and says ready (a slow start of real parts).
var dnsUpgradeVIP = newConf(`drain_timeout = "2s"`, `resolvers = ["198.18.1.1"]`).
	vip("a", ":80").named("be0", 0, 7000).backend(`name = "named"`, `address = "be.db.test:7000"`).String()

// newPIDFromLog reads the new process's PID from its "took the old
// process's sockets" line.
func newPIDFromLog(t *testing.T, log string) int {
	t.Helper()
	_, rest, ok := strings.Cut(log, "upgrade: took the old process's sockets")
	_, rest, ok2 := strings.Cut(rest, `"pid": `)
	if !ok || !ok2 {
		t.Fatalf("no new process's PID in the log:\n%s", log)
	}
	end := strings.IndexAny(rest, ",}")
	pid, err := strconv.Atoi(strings.TrimSpace(rest[:max(end, 0)]))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestUpgradeStopWhileNewStarts: a SIGTERM to the running l4lb while the
// new process of a SIGUSR2 upgrade still starts (waits for DNS) cancels
// the upgrade, and the service stops: the new process is stopped, the old
// one drains and exits, the VIP accepts nothing more. Before, the upgrade
// went on and the new process kept serving.
func TestUpgradeStopWhileNewStarts(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	namedEcho(t, tp, 0, 7000)
	dns := testutil.StartDNSServer(t, tp.LB, "198.18.1.1:53")
	dns.SetHost("be.db.test", 60, tp.BackendIP(0))
	lb := startUpgradable(t, tp.LB, dnsUpgradeVIP)
	dns.SetSilent(true)
	oldPID := lb.cmd.Process.Pid
	if err := syscall.Kill(oldPID, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	lb.waitLog(t, "upgrade: took the old process's sockets")
	newPID := newPIDFromLog(t, lb.log.String())
	lb.track(newPID)
	if err := syscall.Kill(oldPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lb.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the old process still runs 20s after SIGTERM")
	}
	waitGone(t, newPID, 10*time.Second)
	log := lb.log.String()
	if !strings.Contains(log, "upgrade cancelled") || !strings.Contains(log, "shutting down") {
		t.Errorf("want the upgrade cancelled and the old process shut down")
	}
	if c, err := dialVIPWithin(tp, 80, time.Second); err == nil {
		c.Close()
		t.Fatal("the VIP still accepts after the stop")
	}
}

// bulkUpgradeVIP: one backend that streams without end to clients that
// do not read (endlessBackend).
func bulkUpgradeConf() *conf {
	return newConf(`drain_timeout = "2s"`).vip("bulk", ":80").addrs(7000, 0).vip("quiet", ":82", `first_byte_timeout = "1m"`).addrs(7000, 0)
}

var bulkUpgradeVIP = bulkUpgradeConf().String()

// silentClient connects to the quiet VIP and sends nothing: the
// connection waits for its first byte, never established, so an upgrade
// cannot hand it over and its old process keeps it (for handoverFlush,
// then until drain_timeout).
func silentClient(t *testing.T, tp *testutil.Topology) {
	t.Helper()
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp4", net.JoinHostPort(tp.VIP.String(), "82"), 5*time.Second)
		return err
	})
	t.Cleanup(func() { c.Close() })
}

// endlessBackend serves, in backend i's namespace on port, clients it
// writes to without end (until the connection fails); it returns the
// count of bytes the kernel took.
func endlessBackend(t *testing.T, tp *testutil.Topology, i, port int) *atomic.Int64 {
	var ln net.Listener
	tp.Backends[i].MustDo(t, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", tp.BackendIP(i), port))
		return err
	})
	t.Cleanup(func() { ln.Close() })
	var written atomic.Int64
	testutil.ServeConns(ln, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			c.SetWriteDeadline(time.Now().Add(time.Minute))
			n, err := c.Write(buf)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	return &written
}

// stuckDownload opens a connection through the VIP on port that never
// reads, and waits until l4lb holds bytes for it (a pipe lent, with far
// more written by the backend than the client's buffers take): an upgrade
// cannot flush it and leaves it to the old process.
func stuckDownload(t *testing.T, tp *testutil.Topology, lb *lbProcess, written *atomic.Int64, port int) net.Conn {
	t.Helper()
	base := written.Load()
	c := dialSmallRcv(t, tp, port)
	testutil.Eventually(t, 20*time.Second, "l4lb to hold bytes for the client that does not read", func() bool {
		return written.Load()-base >= 2<<20 && lb.status(t).Pipes.Lent > 0
	})
	return c
}

// upgradeAsync runs `l4lb upgrade` and sends its output once it ends.
func (p *lbProcess) upgradeAsync(t *testing.T) <-chan string {
	ch := make(chan string, 1)
	cmd := exec.Command(mustBin(t), "upgrade", "--socket", p.sock)
	go func() {
		out, err := cmd.CombinedOutput()
		ch <- fmt.Sprintf("%s(%v)", out, err)
	}()
	return ch
}

// TestUpgradePassesSignalsOn: a SIGHUP, then in a second upgrade a
// SIGTERM, sent to the running l4lb while it hands over (a connection
// still waiting for its first byte cannot go, and holds it there for 2 s)
// apply to the service: the reload is passed on and applied by the new
// process (it serves the VIP the file gained after it loaded it), the stop
// is passed on and stops the new process, and the old ones drain what they
// kept and exit. A client that reads nothing goes over with the bytes
// l4lb holds for it, in their pipe; the summary counts it so, and the
// waiting one as left behind.
func TestUpgradePassesSignalsOn(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	written := endlessBackend(t, tp, 0, 7000)
	tp.LB.MustExec(t, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 16384") // the pipe, not the socket, holds the bytes
	lb := startUpgradable(t, tp.LB, bulkUpgradeVIP)
	oldPID := lb.cmd.Process.Pid
	stuckDownload(t, tp, lb, written, 80)
	silentClient(t, tp)

	// A reload during the first upgrade.
	done := lb.upgradeAsync(t)
	lb.waitLog(t, "upgrade: the new process is ready; handing over")
	lb.writeConfig(t, bulkUpgradeConf().vip("b", ":81").addrs(7000, 0).String())
	if err := syscall.Kill(oldPID, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	out := <-done
	pid := upgradedPID(out)
	if pid == 0 {
		t.Fatalf("upgrade failed: %s", out)
	}
	lb.track(pid)
	t.Logf("%s", out)
	if want := "1 connections (0 flushed first, 1 with their bytes in flight)"; !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("\n1 connections stay in pid %d", oldPID)) {
		t.Errorf("want %q and the connection that waits for its first byte kept by pid %d:\n%s", want, oldPID, out)
	}
	testutil.Eventually(t, 20*time.Second, "the new process to serve VIP b (the reload passed on)", func() bool {
		st := lb.status(t)
		return st.Process.PID == pid && vipNamed(st, "b").Name == "b"
	})
	select {
	case <-lb.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the old process still runs 20s after the upgrade (drain_timeout 2s)")
	}

	// A stop during the second upgrade.
	stuckDownload(t, tp, lb, written, 80)
	silentClient(t, tp)
	done = lb.upgradeAsync(t)
	lb.waitLogN(t, "upgrade: the new process is ready; handing over", 2)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out = <-done
	newPID := upgradedPID(out)
	if newPID == 0 {
		t.Fatalf("second upgrade failed: %s", out)
	}
	lb.track(newPID)
	t.Logf("%s", out)
	waitGone(t, newPID, 20*time.Second) // the stop passed on
	waitGone(t, pid, 20*time.Second)    // its kept connection reset at drain_timeout
	log := lb.log.String()
	for _, want := range []string{"the previous l4lb passed a reload on", "the previous l4lb passed a stop on"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	if c, err := dialVIPWithin(tp, 80, time.Second); err == nil {
		c.Close()
		t.Fatal("the VIP still accepts after the stop")
	}
}
