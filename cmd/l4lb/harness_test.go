// The one harness of the end-to-end tests: the race-enabled l4lb binary
// they run, an l4lb process in a namespace (its log, signals, status and
// the admin verbs against it), a config builder for the test topology,
// and clients through the VIP.

package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
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

func mustBin(t testing.TB) string {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

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

// lbProcess is l4lb running in a namespace, with its config file and
// admin socket in the test's directory.
type lbProcess struct {
	cmd       *exec.Cmd
	cfg, sock string        // the config file; the admin socket its @ADMIN@ names
	log       fmt.Stringer  // what it (and, upgraded, its successors) logged
	exited    chan struct{} // closed when the process has exited
	err       error         // its exit status, once exited is closed

	mu   sync.Mutex
	pids []int // every l4lb of the test (it and what it upgraded to), for the cleanup
}

// startLB runs l4lb in tp's balancer namespace (startLBIn).
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
	return launch(t, ns, bin, config, false, nil)
}

// startUpgradable runs an l4lb that may be upgraded, with env added to its
// environment: it and every process it hands over to log into one file (a
// pipe would keep the first one's Wait waiting for the last one), and the
// test kills them all at the end.
func startUpgradable(t *testing.T, ns *testutil.Netns, config string, env ...string) *lbProcess {
	t.Helper()
	return startUpgradableBin(t, ns, mustBin(t), config, env...)
}

// startUpgradableBin is startUpgradable with a given l4lb binary.
func startUpgradableBin(t *testing.T, ns *testutil.Netns, bin, config string, env ...string) *lbProcess {
	t.Helper()
	return launch(t, ns, bin, config, true, env)
}

// fileLog is a log file read whole.
type fileLog string

func (f fileLog) String() string {
	data, _ := os.ReadFile(string(f))
	return string(data)
}

// launch starts bin run; upgradable: the log goes to a file, and the
// cleanup also wants no live-flow count released twice (the handover's
// accounting).
func launch(t testing.TB, ns *testutil.Netns, bin, config string, upgradable bool, env []string) *lbProcess {
	t.Helper()
	dir := t.TempDir()
	p := &lbProcess{cfg: filepath.Join(dir, "l4lb.toml"), sock: filepath.Join(dir, "admin.sock"), exited: make(chan struct{})}
	p.writeConfig(t, config)
	p.cmd = ns.Command(bin, "run", "--config", p.cfg)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	var logf *os.File
	if upgradable {
		var err error
		if logf, err = os.Create(filepath.Join(dir, "l4lb.log")); err != nil {
			t.Fatal(err)
		}
		p.log = fileLog(logf.Name())
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
	} else {
		buf := &syncBuffer{}
		p.log = buf
		p.cmd.Stdout, p.cmd.Stderr = buf, buf
	}
	err := p.cmd.Start()
	if logf != nil {
		logf.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	p.track(p.cmd.Process.Pid)
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		log := p.log.String()
		if strings.Contains(log, "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in l4lb")
		}
		if upgradable && strings.Contains(log, "live-flow count underflow") {
			t.Errorf("a live-flow count was released twice (the handover's accounting)")
		}
		if t.Failed() {
			t.Logf("l4lb log:\n%s", log)
		}
		p.killAll(t)
	})
	p.waitLog(t, "l4lb running")
	return p
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

// writeConfig writes the config file, @ADMIN@ replaced by the socket.
func (p *lbProcess) writeConfig(t testing.TB, config string) {
	t.Helper()
	if err := os.WriteFile(p.cfg, []byte(strings.ReplaceAll(config, "@ADMIN@", p.sock)), 0o644); err != nil {
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

// waitLogN waits until the log contains s n times in all.
func (p *lbProcess) waitLogN(t testing.TB, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(p.log.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("l4lb never logged %q (%d times)", s, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *lbProcess) waitLog(t testing.TB, s string) { t.Helper(); p.waitLogN(t, s, 1) }

// hasExited reports whether the process has exited, without waiting.
func (p *lbProcess) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// waitExit waits up to d for the process to exit 0, after why.
func (p *lbProcess) waitExit(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("l4lb exited with %v", p.err)
		}
	case <-time.After(d):
		t.Fatalf("l4lb still runs %v after %s", d, why)
	}
}

// track adds a process the test started through this one (an upgrade's).
func (p *lbProcess) track(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pids = append(p.pids, pid)
}

// killAll kills every l4lb of this test still running: the one it
// started through its handle, those it upgraded to by PID.
func (p *lbProcess) killAll(t testing.TB) {
	if !p.hasExited() {
		p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			t.Errorf("l4lb (pid %d) did not exit after SIGKILL", p.cmd.Process.Pid)
		}
	}
	p.mu.Lock()
	pids := append([]int(nil), p.pids[1:]...)
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

// l4lbCmd runs the l4lb binary with args and returns its output and
// exit code.
func l4lbCmd(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(mustBin(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "SUDO_USER=") // the override's "by" is the socket peer's user alone
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// run runs `l4lb VERB --socket SOCK ARGS...` against this l4lb.
func (p *lbProcess) run(t testing.TB, verb string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return l4lbCmd(t, append([]string{verb, "--socket", p.sock}, args...)...)
}

// verb is run wanting exit 0; it returns stdout.
func (p *lbProcess) verb(t testing.TB, verb string, args ...string) string {
	t.Helper()
	out, errOut, code := p.run(t, verb, args...)
	if code != 0 {
		t.Fatalf("l4lb %s %v: exit %d\n%s%s", verb, args, code, out, errOut)
	}
	return out
}

// status is `l4lb status --json`.
func (p *lbProcess) status(t testing.TB) plane.Status {
	t.Helper()
	var st plane.Status
	out := p.verb(t, "status", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st
}

// statusText is `l4lb status`.
func (p *lbProcess) statusText(t testing.TB) string {
	t.Helper()
	return p.verb(t, "status")
}

// waitStatus waits up to d until cond holds for the status.
func (p *lbProcess) waitStatus(t testing.TB, d time.Duration, what string, cond func(plane.Status) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond(p.status(t)) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, p.status(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitHealth waits until backend id of vip has health.
func (p *lbProcess) waitHealth(t testing.TB, vip, id, health string) {
	t.Helper()
	p.waitStatus(t, 5*time.Second, vip+"/"+id+" "+health, func(st plane.Status) bool {
		return backendOf(st, vip, id).Health == health
	})
}

// reloadOK sends SIGHUP and waits until status reports the reload
// applied.
func (p *lbProcess) reloadOK(t *testing.T) {
	t.Helper()
	var prev time.Time
	if r := p.status(t).Process.LastReload; r != nil {
		prev = r.Time
	}
	p.signal(t, syscall.SIGHUP)
	var r *plane.ReloadStatus
	testutil.Eventually(t, 10*time.Second, "status to report the reload", func() bool {
		r = p.status(t).Process.LastReload
		return r != nil && !r.Time.Equal(prev)
	})
	if !r.OK {
		t.Fatalf("reload refused: %s", r.Error)
	}
}

// vipNamed is the status of the VIP called name (the first listed, which
// is the running one when a draining one shares its name); zero if none.
func vipNamed(st plane.Status, name string) plane.VIPStatus {
	for _, v := range st.VIPs {
		if v.Name == name {
			return v
		}
	}
	return plane.VIPStatus{}
}

// mustVIP is vipNamed, failing the test when there is none.
func mustVIP(t testing.TB, st plane.Status, name string) plane.VIPStatus {
	t.Helper()
	for _, v := range st.VIPs {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no VIP %q in status: %+v", name, st.VIPs)
	return plane.VIPStatus{}
}

// backendOf is backend id of the VIP called vip (not one a reload
// removed, which is listed until its flows end); zero if none.
func backendOf(st plane.Status, vip, id string) plane.BackendStatus {
	for _, b := range vipNamed(st, vip).Backends {
		if b.ID == id && !b.Removed {
			return b
		}
	}
	return plane.BackendStatus{}
}

// vip is the status of the VIP called name, now (mustVIP).
func (p *lbProcess) vip(t testing.TB, name string) plane.VIPStatus {
	t.Helper()
	return mustVIP(t, p.status(t), name)
}

// backend is backend id of the VIP called vip, now (backendOf); the test
// fails when there is none.
func (p *lbProcess) backend(t testing.TB, vip, id string) plane.BackendStatus {
	t.Helper()
	b := backendOf(p.status(t), vip, id)
	if b.ID == "" {
		t.Fatalf("vip %s has no backend %s", vip, id)
	}
	return b
}

// liveFlows is the live flows of each backend of the VIP (but those a
// reload removed), from status.
func (p *lbProcess) liveFlows(t testing.TB, vip string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, b := range p.vip(t, vip).Backends {
		if !b.Removed {
			out[b.ID] = b.LiveFlows
		}
	}
	return out
}

// conf builds a test's l4lb config: [global] with the test's admin
// socket, then VIPs with their health checks and backends; each key is a
// TOML line, written as given. Made for testutil.Topology (the VIP
// address, the backends' addresses), it takes any other listen address or
// backend as raw keys.
type conf struct{ b strings.Builder }

// Addresses of testutil.Topology, as the configs name them.
const (
	topoVIP     = "198.18.2.10"
	topoBackend = "198.18.1.%d" // backend i is 11+i
)

// newConf starts a config whose [global] has admin_socket = "@ADMIN@"
// and global's keys. [global] is on line 2, as in the tests' older
// configs: the lines warnings name stay where they were.
func newConf(global ...string) *conf {
	c := &conf{}
	c.b.WriteString("\n[global]\nadmin_socket = \"@ADMIN@\"\n")
	c.lines("", global)
	return c
}

func (c *conf) lines(indent string, keys []string) {
	for _, k := range keys {
		c.b.WriteString(indent + k + "\n")
	}
}

// vip adds a [[vip]]: listen is an address, or ":PORT" on the
// topology's VIP address.
func (c *conf) vip(name, listen string, keys ...string) *conf {
	if strings.HasPrefix(listen, ":") {
		listen = topoVIP + listen
	}
	fmt.Fprintf(&c.b, "\n[[vip]]\nname = %q\nlisten = %q\n", name, listen)
	c.lines("", keys)
	return c
}

// health adds the last VIP's [vip.health].
func (c *conf) health(keys ...string) *conf {
	c.b.WriteString("  [vip.health]\n")
	c.lines("  ", keys)
	return c
}

// backends adds n backends to the last VIP, be0, be1, ... on the
// topology's backends' port, each with keys.
func (c *conf) backends(n, port int, keys ...string) *conf {
	for i := range n {
		c.named(fmt.Sprintf("be%d", i), i, port, keys...)
	}
	return c
}

// named adds one backend called name on the topology's backend i.
func (c *conf) named(name string, i, port int, keys ...string) *conf {
	return c.at(name, fmt.Sprintf(topoBackend+":%d", 11+i, port), keys...)
}

// at adds a backend called name (unnamed when "") at addr, with keys.
func (c *conf) at(name string, addr any, keys ...string) *conf {
	lines := []string{fmt.Sprintf("address = \"%v\"", addr)}
	if name != "" {
		lines = append([]string{fmt.Sprintf("name = %q", name)}, lines...)
	}
	return c.backend(append(lines, keys...)...)
}

// addrs adds unnamed backends on the topology's backends is, at port.
func (c *conf) addrs(port int, is ...int) *conf {
	for _, i := range is {
		c.at("", fmt.Sprintf(topoBackend+":%d", 11+i, port))
	}
	return c
}

// backend adds a [[vip.backend]] with keys.
func (c *conf) backend(keys ...string) *conf {
	c.b.WriteString("  [[vip.backend]]\n")
	c.lines("  ", keys)
	return c
}

// raw appends TOML as it is (tables the builder does not know).
func (c *conf) raw(toml string) *conf {
	c.b.WriteString(toml)
	return c
}

func (c *conf) String() string { return c.b.String() }

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

// namedEchoes runs namedEcho on each of tp's backends, port 7000.
func namedEchoes(t *testing.T, tp *testutil.Topology) {
	t.Helper()
	for i := range tp.Backends {
		namedEcho(t, tp, i, 7000)
	}
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
	return dialVIPFrom(tp, netip.Addr{}, port, d)
}

// dialVIPFrom dials the VIP's port from src (any address when src is
// zero) in the client namespace and reads the backend's name, each
// within d.
func dialVIPFrom(tp *testutil.Topology, src netip.Addr, port int, d time.Duration) (*clientConn, error) {
	var c net.Conn
	err := tp.Client.Do(func() (err error) {
		dialer := net.Dialer{Timeout: d}
		if src.IsValid() {
			dialer.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
		}
		c, err = dialer.Dial("tcp4", netip.AddrPortFrom(tp.VIP, uint16(port)).String())
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
