// End-to-end tests of what an upgrade hands over: established TCP
// connections with bytes in flight (byte-exact, under load and at scale),
// UDP sessions, and what stays in the old process when the new one refuses
// or dies.

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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

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

// dialSmallRcv connects from the client namespace to the VIP's port with
// a small receive buffer (smallRcvBuf), closed when the test ends.
func dialSmallRcv(t *testing.T, tp *testutil.Topology, port int) net.Conn {
	t.Helper()
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		d := net.Dialer{Control: smallRcvBuf, Timeout: 5 * time.Second}
		c, err = d.Dial("tcp4", net.JoinHostPort(tp.VIP.String(), strconv.Itoa(port)))
		return err
	})
	t.Cleanup(func() { c.Close() })
	return c
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
		c := dialSmallRcv(t, tp, port)
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
