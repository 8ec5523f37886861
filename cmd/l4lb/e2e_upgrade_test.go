// End-to-end tests of `l4lb upgrade` and SIGUSR2: real processes in
// network namespaces, a new binary taking over the old one's sockets.

package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
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

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/reconcile"
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

// Streams for the established-connection tests: each side writes a
// seeded pseudo-random stream while it reads the other's, and hashes
// both; receive buffers are small and bulk readers pause, so the balancer
// holds bytes in its pipes at any moment.
const (
	streamPort   = 7100
	streamRcvBuf = 32 << 10
)

// streamEnd is one side's account of a stream connection.
type streamEnd struct {
	sent, got       int64
	sentSum, gotSum [sha256.Size]byte
	err             error
}

// runStream writes until stop (then FIN) and reads to EOF; it returns
// once both are done.
func runStream(c *net.TCPConn, seed uint64, bulk bool, stop <-chan struct{}) *streamEnd {
	res := &streamEnd{}
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	var wg sync.WaitGroup
	var werr, rerr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		src := rand.NewChaCha8(seedBytes(seed))
		rng := rand.New(src)
		h := sha256.New()
		buf := make([]byte, 24<<10)
		for {
			select {
			case <-stop:
				copy(res.sentSum[:], h.Sum(nil))
				werr = c.CloseWrite()
				return
			default:
			}
			n, pause := 256+rng.IntN(1792), 10*time.Millisecond
			if bulk {
				n, pause = len(buf), 80*time.Millisecond
			}
			src.Read(buf[:n])
			h.Write(buf[:n])
			w, err := c.Write(buf[:n])
			res.sent += int64(w)
			if err != nil {
				werr = err
				return
			}
			time.Sleep(pause)
		}
	}()
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 7))
		h := sha256.New()
		buf := make([]byte, 16<<10)
		phase := time.Now()
		for {
			n, err := c.Read(buf)
			h.Write(buf[:n])
			res.got += int64(n)
			if err == io.EOF {
				copy(res.gotSum[:], h.Sum(nil))
				return
			}
			if err != nil {
				rerr = err
				return
			}
			if bulk && time.Since(phase) > 80*time.Millisecond {
				time.Sleep(time.Duration(100+rng.IntN(200)) * time.Millisecond) // the sender's bytes pile up
				phase = time.Now()
			}
		}
	}()
	wg.Wait()
	res.err = errors.Join(werr, rerr)
	return res
}

func seedBytes(seed uint64) [32]byte {
	var b [32]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	return b
}

// smallRcvBuf sets SO_RCVBUF before connect or listen.
func smallRcvBuf(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, streamRcvBuf)
	})
	return errors.Join(err, serr)
}

// streamServers runs, in every backend's namespace, a server that reads a
// connection's 8-byte id and then streams; results land in ends by id.
type streamServers struct {
	mu   sync.Mutex
	ends map[uint64]*streamEnd
	done bool // finishStreams waits: later connections are only read
	stop chan struct{}
	wg   sync.WaitGroup
}

func startStreamServers(t *testing.T, tp *testutil.Topology, n int) *streamServers {
	ss := &streamServers{ends: map[uint64]*streamEnd{}, stop: make(chan struct{})}
	for i := range n {
		var ln net.Listener
		tp.Backends[i].MustDo(t, func() (err error) {
			lc := net.ListenConfig{Control: smallRcvBuf}
			ln, err = lc.Listen(context.Background(), "tcp4", fmt.Sprintf("%s:%d", tp.BackendIP(i), streamPort))
			return err
		})
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				ss.mu.Lock()
				late := ss.done
				if !late {
					ss.wg.Add(1)
				}
				ss.mu.Unlock()
				if late {
					go func() { io.Copy(io.Discard, c); c.Close() }()
					continue
				}
				go func() {
					defer ss.wg.Done()
					defer c.Close()
					var id [8]byte
					if _, err := io.ReadFull(c, id[:]); err != nil {
						return
					}
					n := binary.LittleEndian.Uint64(id[:])
					end := runStream(c.(*net.TCPConn), n<<1|1, n%2 == 0, ss.stop)
					ss.mu.Lock()
					ss.ends[n] = end
					ss.mu.Unlock()
				}()
			}
		}()
	}
	return ss
}

// streamClients opens n stream connections through the VIP on port.
type streamClients struct {
	ends []*streamEnd
	stop chan struct{}
	wg   sync.WaitGroup
}

func startStreamClients(t *testing.T, tp *testutil.Topology, port, n int) *streamClients {
	sc := &streamClients{ends: make([]*streamEnd, n), stop: make(chan struct{})}
	for i := range n {
		var c net.Conn
		tp.Client.MustDo(t, func() (err error) {
			d := net.Dialer{Control: smallRcvBuf, Timeout: 5 * time.Second}
			c, err = d.Dial("tcp4", net.JoinHostPort(tp.VIP.String(), strconv.Itoa(port)))
			return err
		})
		t.Cleanup(func() { c.Close() })
		var id [8]byte
		binary.LittleEndian.PutUint64(id[:], uint64(i))
		if _, err := c.Write(id[:]); err != nil {
			t.Fatal(err)
		}
		sc.wg.Add(1)
		go func() {
			defer sc.wg.Done()
			sc.ends[i] = runStream(c.(*net.TCPConn), uint64(i)<<1, i%2 == 0, sc.stop)
		}()
	}
	return sc
}

// finish stops every writer, waits for both sides, and compares: what
// each side sent, the other got, byte for byte (by length and SHA-256).
func finishStreams(t *testing.T, sc *streamClients, ss *streamServers) (total int64) {
	t.Helper()
	close(sc.stop)
	close(ss.stop)
	sc.wg.Wait()
	ss.mu.Lock()
	ss.done = true
	ss.mu.Unlock()
	ss.wg.Wait()
	bad := 0
	for i, c := range sc.ends {
		ss.mu.Lock()
		s := ss.ends[uint64(i)]
		ss.mu.Unlock()
		switch {
		case c.err != nil:
			t.Errorf("stream %d, client side: %v (sent %d, got %d)", i, c.err, c.sent, c.got)
		case s == nil:
			t.Errorf("stream %d: the server never finished", i)
		case s.err != nil:
			t.Errorf("stream %d, server side: %v (sent %d, got %d)", i, s.err, s.sent, s.got)
		case c.sent != s.got || c.sentSum != s.gotSum:
			t.Errorf("stream %d, client to server: sent %d bytes, %d arrived (checksums equal: %v)", i, c.sent, s.got, c.sentSum == s.gotSum)
		case s.sent != c.got || s.sentSum != c.gotSum:
			t.Errorf("stream %d, server to client: sent %d bytes, %d arrived (checksums equal: %v)", i, s.sent, c.got, s.sentSum == c.gotSum)
		default:
			total += c.sent + s.sent
			continue
		}
		if bad++; bad > 10 {
			t.Fatal("more than 10 streams broken")
		}
	}
	return total
}

// streamsConf is vipA and VIP streams on port 81, whose backends are the
// first n of be0 and be1 on port 7100.
func streamsConf(n int) string {
	return newConf(`drain_timeout = "3s"`).vip("a", ":80", `protocol = "tcp"`).backends(2, 7000).
		vip("streams", ":81", `protocol = "tcp"`).backends(n, 7100).String()
}

var vipStreams = streamsConf(2)

// TestUpgradeMovesEstablished: under load (clients connecting without
// pause), 200 established connections with data in flight both ways move
// to the new process byte-exact (checksums), none stays behind, and the
// old process exits within a second of the handover.
func TestUpgradeMovesEstablished(t *testing.T) {
	const conns = 200
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	ss := startStreamServers(t, tp, 2)
	// Small send buffers in the balancer's namespace: what a paused reader
	// does not take waits in l4lb's pipes, which the handover must flush.
	tp.LB.MustExec(t, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 16384")
	lb := startUpgradable(t, tp.LB, vipStreams)
	sc := startStreamClients(t, tp, 81, conns)
	dl := startDialLoop(t, tp, 80, 2)
	time.Sleep(time.Second)

	start := time.Now()
	_, out := lb.upgradeOK(t)
	answered := time.Since(start)
	t.Logf("%s", out)
	select {
	case <-lb.exited:
		t.Logf("upgrade answered after %v; the old process had exited %v after the command started",
			answered.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	case <-time.After(time.Second):
		t.Fatalf("the old process still runs a second after the upgrade answered:\n%s", out)
	}
	if !strings.Contains(out, fmt.Sprintf("%d connections (", conns)) {
		// The dial loop's connections may be among them too: at least all
		// the streams moved, none was kept.
		var n int
		if _, err := fmt.Sscanf(out[strings.Index(out, "handed over:"):], "handed over: %d listening sockets, %d connections", new(int), &n); err != nil || n < conns {
			t.Fatalf("not every stream was handed over:\n%s", out)
		}
	}
	if strings.Contains(out, "stay in pid") {
		t.Fatalf("connections stayed in the old process:\n%s", out)
	}
	if strings.Contains(out, " 0 with their bytes in flight)") {
		t.Fatalf("no connection held bytes in l4lb at the handover: the test does not exercise handing them over\n%s", out)
	}
	st := lb.status(t)
	var live int64
	for _, b := range st.VIPs {
		if b.Name == "streams" {
			for _, be := range b.Backends {
				live += int64(be.LiveFlows)
			}
			if b.Active != conns {
				t.Errorf("the new process counts %d active connections on the streams VIP, want %d", b.Active, conns)
			}
		}
	}
	if live != conns {
		t.Errorf("the new process counts %d live flows on the streams backends, want %d", live, conns)
	}
	time.Sleep(time.Second) // the streams go on in the new process
	dl.end(t)
	total := finishStreams(t, sc, ss)
	t.Logf("%d streams, %d MB moved both ways, byte-exact; %d connections dialled meanwhile, none failed", conns, total>>20, dl.dials.Load())
	testutil.Eventually(t, 5*time.Second, "the streams to end in the new process", func() bool {
		for _, v := range lb.status(t).VIPs {
			if v.Name == "streams" && v.Active != 0 {
				return false
			}
		}
		return true
	})
}

var udpUpgradeVIP = newConf().vip("dns", ":53", `protocol = "udp"`, `algorithm = "round_robin"`, `session_timeout = "30s"`).addrs(5300, 0, 1, 2).String()

// TestUpgradeMovesUDPSessions: UDP flows that keep sending through an
// upgrade keep their backends (round robin would give a new session
// another one two times in three), and no datagram is lost: the VIP
// sockets' queues wait while the sessions move.
func TestUpgradeMovesUDPSessions(t *testing.T) {
	const flows = 48
	tp := testutil.NewTopology(t, 3)
	for i := range 3 {
		udpNamedEcho(t, tp, i, 5300)
	}
	lb := startUpgradable(t, tp.LB, udpUpgradeVIP)
	conns := make([]*net.UDPConn, flows)
	for i := range conns {
		tp.Client.MustDo(t, func() (err error) {
			conns[i], err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(tp.VIP, 53)))
			return err
		})
		t.Cleanup(func() { conns[i].Close() })
	}
	ask := func(c *net.UDPConn, msg string) (string, error) {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", err
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			return "", err
		}
		be, rest, ok := strings.Cut(string(buf[:n]), ":")
		if !ok || rest != msg {
			return "", fmt.Errorf("reply %q to %q", buf[:n], msg)
		}
		return be, nil
	}
	pinned := make([]string, flows)
	spread := map[string]int{}
	for i, c := range conns {
		be, err := ask(c, "hello")
		if err != nil {
			t.Fatal(err)
		}
		pinned[i] = be
		spread[be]++
	}
	if len(spread) < 3 {
		t.Fatalf("the flows are on %v: the test needs all three backends", spread)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var asked, moved, lost atomic.Int64
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				asked.Add(1)
				be, err := ask(c, fmt.Sprintf("flow %d datagram %d", i, k))
				switch {
				case err != nil:
					lost.Add(1)
				case be != pinned[i]:
					moved.Add(1)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	_, out := lb.upgradeOK(t)
	t.Logf("%s", out)
	if !strings.Contains(out, fmt.Sprintf("%d UDP sessions", flows)) {
		t.Errorf("not every session was handed over:\n%s", out)
	}
	select {
	case <-lb.exited:
	case <-time.After(time.Second):
		t.Fatal("the old process still runs a second after the upgrade")
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d datagrams asked through the upgrade: %d answered by another backend, %d lost", asked.Load(), moved.Load(), lost.Load())
	if moved.Load() > 0 || lost.Load() > 0 {
		t.Fatalf("%d of %d datagrams went to another backend, %d were lost", moved.Load(), asked.Load(), lost.Load())
	}
	if st := lb.status(t); st.VIPs[0].Active != flows {
		t.Fatalf("the new process holds %d sessions, want %d", st.VIPs[0].Active, flows)
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
	backend := func(id string) reconcile.BackendStatus {
		t.Helper()
		for _, b := range lb.status(t).VIPs[0].Backends {
			if b.ID == id {
				return b
			}
		}
		t.Fatalf("no backend %s", id)
		return reconcile.BackendStatus{}
	}
	testutil.Eventually(t, 10*time.Second, "a connect to be2 to take it down", func() bool {
		if c, err := dialVIP(tp, 80); err == nil {
			c.Close()
		}
		return backend("be2").Health == "down"
	})
	if out, errOut, code := l4lbCmd(t, "disable", "--socket", lb.sock, "--reason", "maintenance", "a", "be0"); code != 0 {
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

// TestUpgradeLeavesDroppedToOld: connections of a backend the new config
// no longer has stay in the old process (the new one refuses them), which
// serves them to their end (byte-exact) and exits then; the others move,
// also over several flushing passes (refused ones are not offered again).
// Then a VIP the new config drops: its connections stay too, and it
// accepts nothing more.
func TestUpgradeLeavesDroppedToOld(t *testing.T) {
	const conns = 40
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	ss := startStreamServers(t, tp, 2)
	tp.LB.MustExec(t, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 16384") // bytes wait in l4lb: several passes
	lb := startUpgradable(t, tp.LB, vipStreams)
	sc := startStreamClients(t, tp, 81, conns)
	time.Sleep(500 * time.Millisecond)
	var onBe1 int64
	for _, v := range lb.status(t).VIPs {
		for _, b := range v.Backends {
			if v.Name == "streams" && b.ID == "be1" {
				onBe1 = b.LiveFlows
			}
		}
	}
	if onBe1 == 0 || onBe1 == conns {
		t.Fatalf("%d of %d streams on be1: the test needs some on each backend", onBe1, conns)
	}

	lb.writeConfig(t, streamsConf(1)) // be1 goes from VIP streams
	oldPID := lb.cmd.Process.Pid
	pid, out := lb.upgradeOK(t)
	t.Logf("%s", out)
	if !strings.Contains(out, fmt.Sprintf("\n%d connections stay in pid %d", onBe1, oldPID)) {
		t.Fatalf("want the %d streams on be1 kept by the old process, exactly:\n%s", onBe1, out)
	}
	select {
	case <-lb.exited:
		t.Fatal("the old process exited while it still served connections")
	case <-time.After(500 * time.Millisecond):
	}
	total := finishStreams(t, sc, ss)
	t.Logf("%d streams to their end, %d on be1 in the old process: %d MB byte-exact", conns, onBe1, total>>20)
	select {
	case <-lb.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the old process did not exit once its connections ended")
	}

	// A VIP the next config drops: its connection stays in pid (now the
	// old one), the VIP accepts nothing more.
	var held net.Conn
	tp.Client.MustDo(t, func() (err error) {
		held, err = net.DialTimeout("tcp4", net.JoinHostPort(tp.VIP.String(), "81"), 5*time.Second)
		return err
	})
	defer held.Close()
	testutil.Eventually(t, 5*time.Second, "the connection to be proxied", func() bool {
		for _, v := range lb.status(t).VIPs {
			if v.Name == "streams" && v.Active == 1 {
				return true
			}
		}
		return false
	})
	lb.writeConfig(t, vipA)
	_, out = lb.upgradeOK(t)
	if !strings.Contains(out, fmt.Sprintf("\n1 connections stay in pid %d", pid)) {
		t.Fatalf("want the connection of the dropped VIP kept:\n%s", out)
	}
	if _, err := held.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := dialVIPWithin(tp, 81, time.Second); err == nil {
		t.Fatal("the dropped VIP still accepts")
	}
	held.Close()
	waitGone(t, pid, 5*time.Second)
}

// TestUpgradeNewDiesMidHandover: the new process dies when the first
// connections reach it. The old one takes back what it had not handed
// over, resumes accepting and reading, and keeps serving: no dial fails,
// every stream goes on byte-exact, the command says why.
func TestUpgradeNewDiesMidHandover(t *testing.T) {
	const conns = 20
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	ss := startStreamServers(t, tp, 2)
	tp.LB.MustExec(t, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 16384")
	lb := startUpgradable(t, tp.LB, vipStreams, "L4LB_TEST_UPGRADE_EXIT_AT=conns") // internal/upgrade's opConns
	sc := startStreamClients(t, tp, 81, conns)
	dl := startDialLoop(t, tp, 80, 2)
	time.Sleep(500 * time.Millisecond)

	out, errOut, code := lb.upgrade(t)
	if code != 1 || !strings.Contains(errOut, "exited before it took over") || !strings.Contains(errOut, "exit status 3") {
		t.Fatalf("upgrade with a new process that dies mid-handover: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("%s", strings.TrimSpace(errOut))
	time.Sleep(500 * time.Millisecond)
	st := lb.status(t)
	if st.Process.PID != lb.cmd.Process.Pid {
		t.Fatalf("the admin socket answers from pid %d", st.Process.PID)
	}
	for _, v := range st.VIPs {
		if v.Name == "streams" && v.Active != conns {
			t.Errorf("the old process counts %d streams, want %d", v.Active, conns)
		}
	}
	// Connections the new process accepted before it died die with it,
	// as in any crash; none may be refused.
	dl.halt()
	dl.mu.Lock()
	for _, e := range dl.errs {
		if strings.Contains(e, "refused") || strings.Contains(e, "timeout") {
			t.Errorf("a client was turned away: %s", e)
		}
	}
	dl.mu.Unlock()
	total := finishStreams(t, sc, ss)
	t.Logf("%d streams, %d MB byte-exact in the old process; %d dials, %d lost with the dead new process, none refused",
		conns, total>>20, dl.dials.Load(), dl.failures.Load())
}

// TestUpgradeHandover: 300 idle connections (three batches) move to the
// new process, every one, none flushed (they held nothing) and none left
// behind; each echoes afterwards, and the old process exits. The always
// run, race-built version of TestUpgradeHandoverScale.
func TestUpgradeHandover(t *testing.T) {
	upgradeIdleConns(t, mustBin(t), 300)
}

// TestUpgradeHandoverScale measures how long handing over N established
// connections takes, with l4lb built without the race detector. It runs
// only with L4LB_UPGRADE_SCALE=N (N <= 4500: the test process holds both
// ends' sockets under the 20000 open-file limit).
func TestUpgradeHandoverScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("L4LB_UPGRADE_SCALE"))
	if n <= 0 {
		t.Skip("a measurement: set L4LB_UPGRADE_SCALE=N to run it")
	}
	bin, err := benchBinary()
	if err != nil {
		t.Fatal(err)
	}
	mustBin(t) // the command's binary, built before the clock runs
	upgradeIdleConns(t, bin, n)
}

// upgradeIdleConns upgrades an l4lb (bin) holding n idle connections and
// checks that all of them moved and work.
func upgradeIdleConns(t *testing.T, bin string, n int) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startUpgradableBin(t, tp.LB, bin, vipA)
	conns := make([]*clientConn, n)
	for i := range conns {
		conns[i] = mustDialVIP(t, tp, 80)
	}
	start := time.Now()
	_, out := lb.upgradeOK(t)
	answered := time.Since(start)
	select {
	case <-lb.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the old process still runs 30s after the upgrade:\n%s", out)
	}
	t.Logf("%d connections: %s(upgrade command %v, old process gone %v after it started)", n, out, answered.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if want := fmt.Sprintf("handed over: 1 listening sockets, %d connections (0 flushed first, 0 with their bytes in flight)", n); !strings.Contains(out, want) || strings.Contains(out, "stay in pid") {
		t.Fatalf("want %q and nothing kept:\n%s", want, out)
	}
	if a := vipNamed(lb.status(t), "a").Active; a != int64(n) {
		t.Errorf("the new process counts %d active connections, want %d", a, n)
	}
	for i, c := range conns {
		if err := c.echo("after"); err != nil {
			t.Fatalf("connection %d after the upgrade: %v", i, err)
		}
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
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		d := net.Dialer{Control: smallRcvBuf, Timeout: 5 * time.Second}
		c, err = d.Dial("tcp4", net.JoinHostPort(tp.VIP.String(), strconv.Itoa(port)))
		return err
	})
	t.Cleanup(func() { c.Close() })
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
