// End-to-end tests of the l4lb binary in network namespaces: reload and
// shutdown as an operator drives them, with real signals.

package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// binDir holds the binaries the tests build; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "l4lb-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinary compiles l4lb once per test process, with the race
// detector: the daemon under test runs with it too. A race-enabled
// process sleeps a second at exit by default (so that other threads can
// report); every l4lb this test process starts inherits GORACE without
// that sleep, or each `l4lb status` would take a second.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir := filepath.Join(binDir, "race")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "l4lb")
	args := []string{"build", "-race", "-o", bin}
	if tags := testBuildTags(); tags != "" {
		args = append(args, "-tags", tags) // l4lbpoison under make test: the daemon is poisoned too
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	if err := os.Setenv("GORACE", "atexit_sleep_ms=0 halt_on_error=1"); err != nil {
		return "", err
	}
	return bin, nil
})

// testBuildTags are the build tags this test binary was built with
// (`make test` gives l4lbpoison).
func testBuildTags() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return buildSetting(info.Settings, "-tags")
}

// buildSetting is the value of one build setting, or "".
func buildSetting(settings []debug.BuildSetting, key string) string {
	for _, s := range settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// TestDaemonBuiltWithRace: the l4lb that the end-to-end tests run is the
// race-enabled build, as `make test` (go test -race) promises for all the
// code it runs, with the tags of the tests (l4lbpoison under make test).
// Only benchBinary is built without them, for the few tests that measure
// or hold more connections than a race-enabled process can (see its
// comment).
func TestDaemonBuiltWithRace(t *testing.T) {
	info, err := buildinfo.ReadFile(mustBin(t))
	if err != nil {
		t.Fatal(err)
	}
	if buildSetting(info.Settings, "-race") != "true" {
		t.Fatalf("the daemon under the end-to-end tests was built without -race: build settings %v", info.Settings)
	}
	if got, want := buildSetting(info.Settings, "-tags"), testBuildTags(); got != want {
		t.Fatalf("the daemon was built with tags %q, the tests with %q", got, want)
	}
}

// lbProcess is l4lb running in the balancer namespace.
type lbProcess struct {
	cmd    *exec.Cmd
	cfg    string
	log    *syncBuffer
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, once exited is closed
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startLB(t *testing.T, tp *testutil.Topology, config string) *lbProcess {
	t.Helper()
	return startLBIn(t, tp.LB, config)
}

// startLBIn runs l4lb in namespace ns with config (@ADMIN@ replaced by a
// socket path in the test's directory) and waits until it serves.
func startLBIn(t testing.TB, ns *testutil.Netns, config string) *lbProcess {
	t.Helper()
	return startBinaryIn(t, ns, mustBin(t), config)
}

// startBinaryIn is startLBIn with a given l4lb binary.
func startBinaryIn(t testing.TB, ns *testutil.Netns, bin, config string) *lbProcess {
	t.Helper()
	dir := t.TempDir()
	p := &lbProcess{cfg: filepath.Join(dir, "l4lb.toml"), log: &syncBuffer{}, exited: make(chan struct{})}
	p.writeConfig(t, strings.ReplaceAll(config, "@ADMIN@", filepath.Join(dir, "admin.sock")))
	p.cmd = ns.Command(bin, "run", "--config", p.cfg)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		if strings.Contains(p.log.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in l4lb")
		}
		if t.Failed() {
			t.Logf("l4lb log:\n%s", p.log.String())
		}
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			select {
			case <-p.exited:
			case <-time.After(5 * time.Second):
				t.Errorf("l4lb (pid %d) did not exit after SIGKILL", p.cmd.Process.Pid)
			}
		}
	})
	p.waitLog(t, "l4lb running")
	return p
}

func (p *lbProcess) writeConfig(t testing.TB, config string) {
	t.Helper()
	if err := os.WriteFile(p.cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

// currentConfig returns the config file's text.
func (p *lbProcess) currentConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func (p *lbProcess) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// waitLog waits until the log contains s n times in all.
func (p *lbProcess) waitLogN(t testing.TB, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.log.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("l4lb never logged %q (%d times)", s, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *lbProcess) waitLog(t testing.TB, s string) { t.Helper(); p.waitLogN(t, s, 1) }

// namedEcho runs, in backend i's namespace, a server on port that writes
// its name on a line and then echoes.
func namedEcho(t *testing.T, tp *testutil.Topology, i int, port int) {
	t.Helper()
	var ln net.Listener
	tp.Backends[i].MustDo(t, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", tp.BackendIP(i), port))
		return err
	})
	t.Cleanup(func() { ln.Close() })
	testutil.ServeConns(ln, testutil.NamedEcho(fmt.Sprintf("be%d", i)))
}

// clientConn is a connection from the client namespace through the VIP.
type clientConn struct {
	net.Conn
	r       *bufio.Reader
	backend string
}

func dialVIP(tp *testutil.Topology, port int) (*clientConn, error) {
	return dialVIPWithin(tp, port, 10*time.Second)
}

// dialVIPWithin is dialVIP with a deadline for connect and first line.
func dialVIPWithin(tp *testutil.Topology, port int, d time.Duration) (*clientConn, error) {
	var c net.Conn
	err := tp.Client.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", tp.VIP, port), d)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(d))
	cc := &clientConn{Conn: c, r: bufio.NewReader(c)}
	name, err := cc.r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("reading backend name: %w", err)
	}
	cc.backend = strings.TrimSpace(name)
	return cc, nil
}

func mustDialVIP(t *testing.T, tp *testutil.Topology, port int) *clientConn {
	t.Helper()
	c, err := dialVIP(tp, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo checks the connection still carries bytes both ways.
func (c *clientConn) echo(msg string) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo %q, got %q", msg, got)
	}
	return nil
}

// backendsSeen dials n times and counts connections per backend.
func backendsSeen(t *testing.T, tp *testutil.Topology, port, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for i := 0; i < n; i++ {
		c, err := dialVIP(tp, port)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		seen[c.backend]++
		c.Close()
	}
	return seen
}

const vipA = `
[global]
admin_socket = "@ADMIN@"
drain_timeout = "3s"

[[vip]]
name = "a"
listen = "198.18.2.10:80"
protocol = "tcp"
  [[vip.backend]]
  name = "be0"
  address = "198.18.1.11:7000"
  [[vip.backend]]
  name = "be1"
  address = "198.18.1.12:7000"
`

// Reload: backend 2 added, backend 0 removed, VIP b added, then removed;
// the established connection and a stream of new ones never notice.
const vipAReloaded = `
[global]
admin_socket = "@ADMIN@"
drain_timeout = "3s"

[[vip]]
name = "a"
listen = "198.18.2.10:80"
protocol = "tcp"
  [[vip.backend]]
  name = "be1"
  address = "198.18.1.12:7000"
  [[vip.backend]]
  name = "be2"
  address = "198.18.1.13:7000"

[[vip]]
name = "b"
listen = "198.18.2.10:81"
protocol = "tcp"
  [[vip.backend]]
  name = "be2"
  address = "198.18.1.13:7000"
`

func TestReloadKeepsServing(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	for i := range 3 {
		namedEcho(t, tp, i, 7000)
	}
	lb := startLB(t, tp, vipA)
	admin := filepath.Join(filepath.Dir(lb.cfg), "admin.sock")

	established := mustDialVIP(t, tp, 80)
	if err := established.echo("before"); err != nil {
		t.Fatal(err)
	}
	if seen := backendsSeen(t, tp, 80, 6); seen["be0"] == 0 || seen["be1"] == 0 || seen["be2"] != 0 {
		t.Fatalf("before reload: %v", seen)
	}

	// A client dialling all through the reloads must never be refused. It
	// pauses (sampling held) while the test samples round robin's spread,
	// which its own picks would otherwise interleave with.
	stop := make(chan struct{})
	var dials, failures atomic.Int64
	var wg sync.WaitGroup
	var sampling sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			sampling.Lock()
			c, err := dialVIP(tp, 80)
			sampling.Unlock()
			dials.Add(1)
			if err != nil {
				failures.Add(1)
				t.Errorf("dial during reload: %v", err)
				continue
			}
			c.Close()
		}
	}()
	var stopOnce sync.Once
	stopDialer := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(stopDialer) // also when the test fails early: before l4lb stops
	sample := func(port, n int) map[string]int {
		t.Helper()
		sampling.Lock()
		defer sampling.Unlock()
		return backendsSeen(t, tp, port, n)
	}

	lb.writeConfig(t, strings.ReplaceAll(vipAReloaded, "@ADMIN@", admin))
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	if err := established.echo("after add/remove"); err != nil {
		t.Fatalf("established connection broken by reload: %v", err)
	}
	if seen := sample(80, 6); seen["be0"] != 0 || seen["be1"] == 0 || seen["be2"] == 0 {
		t.Fatalf("after reload: %v", seen)
	}
	if seen := backendsSeen(t, tp, 81, 2); seen["be2"] != 2 {
		t.Fatalf("new VIP b: %v", seen)
	}

	// A bad file is refused and the running config keeps serving.
	lb.writeConfig(t, "[[vip]]\nname = \"broken\"\nlisten = \"nonsense\"\n")
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload refused")
	if err := established.echo("after bad reload"); err != nil {
		t.Fatal(err)
	}
	if seen := backendsSeen(t, tp, 81, 1); seen["be2"] != 1 {
		t.Fatalf("VIP b after bad reload: %v", seen)
	}

	// Removing VIP b stops it accepting; VIP a is untouched.
	lb.writeConfig(t, strings.ReplaceAll(vipA, "@ADMIN@", admin))
	lb.signal(t, syscall.SIGHUP)
	lb.waitLogN(t, "reload applied", 2)
	if _, err := dialVIP(tp, 81); err == nil {
		t.Fatal("removed VIP b still accepts")
	}
	if err := established.echo("after VIP removal"); err != nil {
		t.Fatal(err)
	}
	stopDialer()
	if dials.Load() < 10 || failures.Load() != 0 {
		t.Fatalf("%d dials during reloads, %d failed", dials.Load(), failures.Load())
	}
	if out, err := exec.Command(mustBin(t), "status", "--socket", admin).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "VIP a") {
		t.Fatalf("status: %v\n%s", err, out)
	}
}

func mustBin(t testing.TB) string {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestSIGTERMDrains: an open connection keeps working after SIGTERM until it
// closes; the process then exits 0 without waiting for the full timeout.
func TestSIGTERMDrains(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	for i := range 2 {
		namedEcho(t, tp, i, 7000)
	}
	lb := startLB(t, tp, vipA)
	c := mustDialVIP(t, tp, 80)
	lb.signal(t, syscall.SIGTERM)
	lb.waitLog(t, "shutting down")
	time.Sleep(300 * time.Millisecond)
	if err := c.echo("during drain"); err != nil {
		t.Fatalf("connection broken during drain: %v", err)
	}
	if _, err := dialVIP(tp, 80); err == nil {
		t.Fatal("new connection accepted while draining")
	}
	c.Close()
	select {
	case <-lb.exited:
		if lb.err != nil {
			t.Fatalf("l4lb exited with %v", lb.err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("l4lb still running after its last connection closed")
	}
}

// TestSIGTERMResetsAfterDrainTimeout: a connection still open at the drain
// timeout is reset, and the process exits 0.
func TestSIGTERMResetsAfterDrainTimeout(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	namedEcho(t, tp, 0, 7000)
	lb := startLB(t, tp, strings.Replace(vipA, `drain_timeout = "3s"`, `drain_timeout = "1s"`, 1))
	c := mustDialVIP(t, tp, 80)
	start := time.Now()
	lb.signal(t, syscall.SIGTERM)
	select {
	case <-lb.exited:
		if lb.err != nil {
			t.Fatalf("l4lb exited with %v", lb.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("l4lb did not exit after the drain timeout")
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("exited after %v, before the 1s drain timeout", d)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.r.ReadByte(); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection after shutdown: %v, want a reset (ECONNRESET)", err)
	}
}

// TestSecondSignalCutsDrain: a second SIGTERM (or SIGINT) during a long
// drain resets the connections still open at once (the client reads
// ECONNRESET, not an orderly EOF) and the process exits 0 promptly.
func TestSecondSignalCutsDrain(t *testing.T) {
	for _, second := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(second.String(), func(t *testing.T) {
			tp := testutil.NewTopology(t, 1)
			namedEcho(t, tp, 0, 7000)
			lb := startLB(t, tp, strings.Replace(vipA, `drain_timeout = "3s"`, `drain_timeout = "60s"`, 1))
			c := mustDialVIP(t, tp, 80)
			lb.signal(t, syscall.SIGTERM)
			lb.waitLog(t, "shutting down")
			if err := c.echo("during drain"); err != nil {
				t.Fatalf("connection broken by the first signal: %v", err)
			}
			start := time.Now()
			lb.signal(t, second)
			select {
			case <-lb.exited:
				if lb.err != nil {
					t.Fatalf("l4lb exited with %v", lb.err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("l4lb still draining 5s after the second signal (drain_timeout 60s)")
			}
			t.Logf("exited %v after the second signal", time.Since(start))
			if !strings.Contains(lb.log.String(), "second signal") {
				t.Error("the second signal was not logged")
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.r.ReadByte(); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("client read after the second signal: %v, want ECONNRESET", err)
			}
		})
	}
}
