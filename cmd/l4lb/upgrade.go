// `l4lb upgrade` and SIGUSR2: the running l4lb starts a new binary and
// hands it its sockets; it keeps serving, and says why, when the new one
// fails. This file is the old process's side; takeover.go is the new one's.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/l4/proxy"
)

// upgradeStartTimeout bounds the new process's start by default: loading
// its config, opening its new VIPs (an XDP program load among them) and
// saying ready (`l4lb upgrade --timeout`).
const upgradeStartTimeout = time.Minute

// upgradeRequest is an upgrade asked of the signal loop, which runs them
// one at a time with reloads.
type upgradeRequest struct {
	binary  string
	timeout time.Duration // 0: upgradeStartTimeout
	reply   chan admin.UpgradeResult
}

// Upgrade is the admin API's POST /upgrade: the signal loop runs it.
func (d *daemon) Upgrade(ctx context.Context, req admin.UpgradeRequest) (admin.UpgradeResult, error) {
	u := upgradeRequest{binary: req.Binary, reply: make(chan admin.UpgradeResult, 1)}
	if req.Timeout != "" {
		u.timeout, _ = time.ParseDuration(req.Timeout) // checked by the API
	}
	select {
	case d.upgrades <- u:
	case <-d.stopping:
		return admin.UpgradeResult{}, errors.New("l4lb is shutting down: no upgrade")
	case <-ctx.Done():
		return admin.UpgradeResult{}, ctx.Err()
	}
	return <-u.reply, nil
}

// errUpgradeCancelled: a stop asked of this process while the new one
// started; the stop is the loop's to act on once the upgrade is undone.
var errUpgradeCancelled = errors.New("upgrade cancelled: l4lb was asked to stop while the new process started")

// upgrade starts binary (default: the one this process was started from,
// read from disk again) and hands over to it. On success the caller exits
// once the connections that stayed here end, passing the stops and
// reloads it still gets on to next; on failure nothing changed.
func (d *daemon) upgrade(cfg *config.Config, binary string, timeout time.Duration) (admin.UpgradeResult, *successor) {
	start := time.Now()
	if timeout <= 0 {
		timeout = upgradeStartTimeout
	}
	res := admin.UpgradeResult{OldPID: os.Getpid(), Binary: binary}
	if res.Binary == "" {
		res.Binary = d.exe
	}
	d.log.Info("upgrade: starting the new binary", zap.String("binary", res.Binary))
	next, err := d.upgradeTo(cfg, &res, timeout)
	res.Seconds = time.Since(start).Seconds()
	if errors.Is(err, errUpgradeCancelled) {
		res.Error, res.Stopping = err.Error(), true
		d.log.Warn("upgrade cancelled: the new process was stopped before it served; this one stops", zap.Int("new_pid", res.PID), zap.Error(err))
		return res, nil
	}
	if err != nil {
		res.Error = err.Error()
		var pe *problemsError
		if errors.As(err, &pe) {
			res.Error, res.Problems = pe.msg, pe.problems
		}
		d.log.Error("upgrade failed: this process keeps serving", zap.String("binary", res.Binary), zap.Int("new_pid", res.PID),
			zap.Error(err), zap.Strings("problems", res.Problems))
		return res, nil
	}
	res.OK = true
	d.log.Info("upgrade done: the new process serves; this one exits once what it kept has drained",
		zap.Int("new_pid", res.PID), zap.Int("listeners", res.Listeners), zap.Int("connections", res.Connections),
		zap.Int("flushed", res.Flushed), zap.Int("piped", res.Piped), zap.Int("sessions", res.Sessions), zap.Int("kept", res.Kept), zap.Float64("seconds", res.Seconds))
	return res, next
}

// problemsError is the new process's refusal with its config problems.
type problemsError struct {
	msg      string
	problems []string
}

func (e *problemsError) Error() string {
	if len(e.problems) == 0 {
		return e.msg
	}
	return e.msg + ": " + strings.Join(e.problems, "; ")
}

// upgradeTo runs the old side of the protocol and returns the new
// process; any error leaves this process as it was.
func (d *daemon) upgradeTo(cfg *config.Config, res *admin.UpgradeResult, timeout time.Duration) (*successor, error) {
	if res.Binary == "" {
		return nil, errors.New("the path of the running binary is unknown: name one with --binary")
	}
	if why := d.rt.UpgradeBlocker(); why != "" {
		return nil, errors.New(why)
	}
	if err := checkExecutable(res.Binary); err != nil {
		return nil, err
	}
	child, err := startChild(res.Binary)
	if err != nil {
		return nil, err
	}
	child.timeout = timeout
	res.PID = child.pid()
	o := &oldSide{d: d, child: child, res: res, deadline: time.Now().Add(timeout)}
	if err := o.run(); err != nil {
		o.rollback()
		return nil, err
	}
	return &successor{child: child, log: d.log}, nil
}

// checkExecutable refuses a binary that cannot run, before forking.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("binary: %w", err)
	}
	if !fi.Mode().IsRegular() || unix.Access(path, unix.X_OK) != nil {
		return fmt.Errorf("binary %s: not an executable file", path)
	}
	return nil
}

// oldSide is the running process during an upgrade.
type oldSide struct {
	d        *daemon
	child    *upgradeChild
	res      *admin.UpgradeResult
	deadline time.Time
	held     bool // XDP map writes held
	paused   bool // accepting paused
	pipes    bool // the new process adopts pipes with bytes in flight (its hello said)
}

// run is the protocol, from the new process's hello to its done.
func (o *oldSide) run() error {
	hello, err := o.awaitStart(opHello)
	if err != nil {
		return err
	}
	o.pipes = hello.Pipes
	o.d.rt.HoldXDP(true) // the new process writes its config into the pinned maps now
	o.held = true
	if err := o.sendListeners(); err != nil {
		return err
	}
	if _, err := o.awaitStart(opReady); err != nil {
		return err
	}
	o.d.log.Info("upgrade: the new process is ready; handing over", zap.Int("new_pid", o.child.pid()))
	// Both processes accept on the shared sockets now; this one stops.
	// Clients queue in the kernel's listen queue, which outlives either.
	o.d.rt.PauseAccepting(true)
	o.paused = true
	if err := o.handSessions(); err != nil {
		return err
	}
	if err := o.handConns(); err != nil {
		return err
	}
	return o.commit()
}

// awaitStart waits for op while the new process starts (it loads its
// config, waits for DNS, opens its VIPs: as long as the upgrade's
// timeout). A stop asked of this process meanwhile cancels the upgrade:
// the new process is killed, as when it fails, and the stop is put back
// for the loop. From ready on, the handover is bounded and runs to its
// end; a stop then goes to the new process (successor).
func (o *oldSide) awaitStart(op string) (*handoffMsg, error) {
	type reply struct {
		m   *handoffMsg
		err error
	}
	got := make(chan reply, 1)
	go func() {
		m, err := o.child.expect(op, o.deadline)
		got <- reply{m, err}
	}()
	var sig os.Signal
	select {
	case r := <-got:
		return r.m, r.err
	case sig = <-o.d.sigs.stop:
	case sig = <-o.d.sigs.passed:
	}
	o.d.sigs.putBack(sig)
	_ = o.child.cmd.Process.Kill()
	<-got // the read ends with the new process
	return nil, fmt.Errorf("%w (%v)", errUpgradeCancelled, sig)
}

// handSessions hands every UDP session over (its backend socket and its
// backend), so that flows keep their backends; the new process reads the
// VIP sockets once it has them. Sessions it refuses end here.
func (o *oldSide) handSessions() error {
	all := o.d.rt.DetachSessions()
	dropped := 0
	for i := 0; ; {
		n := min(len(all)-i, maxFDsPerMsg)
		batch := all[i : i+n]
		i += n
		m := &handoffMsg{Op: opSessions, Last: i == len(all)}
		fds := make([]int, 0, n)
		for _, d := range batch {
			m.Sessions = append(m.Sessions, d.State)
			fds = append(fds, d.FD)
		}
		taken, err := o.exchange(m, fds, n)
		if err != nil {
			proxy.RestoreSessions(all[i-n:])
			return err
		}
		for _, ok := range taken {
			if ok {
				o.res.Sessions++
			} else {
				dropped++
			}
		}
		proxy.ReleaseSessions(batch)
		if m.Last {
			break
		}
	}
	if dropped > 0 {
		o.d.log.Warn("upgrade: UDP sessions the new config has no place for ended; their next datagram starts a new one", zap.Int("sessions", dropped))
	}
	return nil
}

// exchange sends one batch and returns which of its n items the new
// process took.
func (o *oldSide) exchange(m *handoffMsg, fds []int, n int) ([]bool, error) {
	if err := o.child.conn.send(m, fds); err != nil {
		return nil, err
	}
	reply, err := o.child.expect(opTaken, time.Now().Add(30*time.Second))
	if err != nil {
		return nil, err
	}
	if len(reply.Taken) != n {
		return nil, fmt.Errorf("upgrade: the new l4lb answered for %d of %d %s", len(reply.Taken), n, m.Op)
	}
	return reply.Taken, nil
}

// handoverFlush bounds how long a connection may take to write out the
// bytes this process holds for it before it is handed over, when they are
// not in a pipe (or the new process takes no pipes); one that cannot (its
// receiver does not read) stays here and drains.
const handoverFlush = 2 * time.Second

// handConns hands every established TCP connection over, in batches the
// new process adopts or refuses (then it stays here).
func (o *oldSide) handConns() error {
	start := time.Now()
	defer func() { o.res.HandoverSeconds = time.Since(start).Seconds() }()
	st, err := o.d.rt.DetachConns(handoverFlush, o.pipes, o.emitConns)
	o.res.Kept += st.Kept
	if st.Kept > 0 {
		o.d.log.Warn("upgrade: connections not flushed in time (or still connecting) stay in this process and drain",
			zap.Int("kept", st.Kept), zap.Duration("flush", handoverFlush))
	}
	return err
}

// emitConns sends ready connections in batches; each is released here
// once the new process took it, or put back to work here.
func (o *oldSide) emitConns(conns []*proxy.DetachedConn) error {
	for len(conns) > 0 {
		n, fds := 0, 0
		for n < len(conns) && fds+len(conns[n].FDs) <= maxFDsPerMsg {
			fds += len(conns[n].FDs)
			n++
		}
		batch := conns[:n]
		conns = conns[n:]
		taken, err := o.sendConns(batch)
		if err != nil {
			proxy.RestoreConns(append(batch, conns...))
			o.res.Kept += len(batch) + len(conns)
			return err
		}
		var gone, left []*proxy.DetachedConn
		for i, c := range batch {
			if !taken[i] {
				left = append(left, c)
				continue
			}
			gone = append(gone, c)
			if c.Flushed {
				o.res.Flushed++
			}
			if c.Piped {
				o.res.Piped++
			}
		}
		proxy.ReleaseConns(gone)
		proxy.RestoreConns(left)
		o.res.Connections += len(gone)
		o.res.Kept += len(left)
	}
	return nil
}

// sendConns sends one batch and returns which the new process took.
func (o *oldSide) sendConns(batch []*proxy.DetachedConn) ([]bool, error) {
	m := &handoffMsg{Op: opConns}
	var fds []int
	for _, c := range batch {
		m.Conns = append(m.Conns, c.State)
		fds = append(fds, c.FDs...)
	}
	return o.exchange(m, fds, len(batch))
}

// sendListeners passes every VIP socket, the admin socket and the metrics
// listener; the messages' descriptors are duplicates closed here.
func (o *oldSide) sendListeners() error {
	ls, err := o.d.rt.ExportListeners()
	if err != nil {
		return fmt.Errorf("exporting the listening sockets: %w", err)
	}
	defer ls.Close()
	var b msgBatcher
	for key, fd := range ls.TCP {
		b.add(func(m *handoffMsg) { m.TCP = append(m.TCP, key) }, fd)
	}
	for key, g := range ls.UDP {
		b.add(func(m *handoffMsg) { m.UDP = append(m.UDP, udpGroupWire{Key: key, N: len(g)}) }, g...)
	}
	if o.d.admin != nil {
		f, err := o.d.admin.ListenerFile()
		if err != nil {
			return fmt.Errorf("admin socket: %w", err)
		}
		defer f.Close()
		b.add(func(m *handoffMsg) { m.Admin = o.d.admin.Path() }, int(f.Fd()))
	}
	if o.d.metricsLn != nil {
		f, err := o.d.metricsLn.File()
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		defer f.Close()
		b.add(func(m *handoffMsg) { m.Metrics = o.d.metricsLn.Addr().String() }, int(f.Fd()))
	}
	o.res.Listeners = ls.Len()
	if err := b.send(o.child.conn, opListeners); err != nil {
		return err
	}
	return o.sendBackends()
}

// sendBackends passes each backend's health and override, in messages of
// backendsPerMsg.
func (o *oldSide) sendBackends() error {
	all := o.d.rt.ExportBackends()
	for i := 0; ; {
		n := min(len(all)-i, backendsPerMsg)
		m := &handoffMsg{Op: opBackends, Backends: all[i : i+n], Last: i+n == len(all)}
		if err := o.child.conn.send(m, nil); err != nil {
			return err
		}
		if i += n; m.Last {
			return nil
		}
	}
}

// commit is the point of no return: the new process becomes the service's
// main process and takes the admin socket.
func (o *oldSide) commit() error {
	o.d.tellManager(o.d.notify.mainPID(o.child.pid()))
	if o.d.admin != nil {
		o.d.admin.Handover() // admin clients wait in its listen queue until the new one serves
	}
	if o.d.metrics != nil {
		_ = o.d.metrics.Close()
		o.d.metrics, o.d.metricsLn = nil, nil
	}
	if err := o.child.conn.send(&handoffMsg{Op: opDone, Kept: o.res.Kept}, nil); err != nil {
		o.d.log.Error("upgrade: the new process did not take the last message; it runs, this one exits", zap.Error(err))
		return nil
	}
	m, err := o.child.expect(opDone, time.Now().Add(10*time.Second))
	if err != nil {
		o.d.log.Error("upgrade: no answer from the new process after the handover; it runs, this one exits", zap.Error(err))
		return nil
	}
	if !m.AdminTaken && o.d.admin != nil {
		o.d.log.Warn("upgrade: the new process binds another admin socket; this one's file stays until a later start clears it",
			zap.String("admin_socket", o.d.admin.Path()))
	}
	return nil // the socketpair stays open: stops and reloads go through it (successor)
}

// rollback undoes what run did before it failed, and stops the new process.
func (o *oldSide) rollback() {
	o.child.stop()
	if o.paused {
		o.d.rt.PauseAccepting(false)
	}
	if o.held {
		o.d.rt.HoldXDP(false)
	}
}

// successor is the process an upgrade handed over to, as the old one sees
// it while it drains what it kept: the stops and reloads this one still
// gets are the service's, and go to the new one over the socketpair (a
// message, not a signal: a stop sent to both processes at once, by
// `kill $(pidof l4lb)`, must not reach the new one as a second stop that
// resets its connections). A new process that no longer reads the
// socketpair (an older l4lb) gets the signal itself.
type successor struct {
	child *upgradeChild
	log   *zap.Logger
}

// pass sends op (opStop or opReload), asked by sig, on; nil-safe.
func (s *successor) pass(op string, sig os.Signal) {
	if s == nil {
		return
	}
	pid := s.child.pid()
	err := s.child.conn.send(&handoffMsg{Op: op, Signal: sig.String(), PID: os.Getpid()}, nil)
	if err != nil {
		fallback := syscall.SIGHUP
		if op == opStop {
			fallback = syscall.SIGTERM
		}
		if serr := s.child.cmd.Process.Signal(fallback); serr != nil {
			s.log.Warn("signal not passed on: the new process is gone", zap.Stringer("signal", sig), zap.Int("new_pid", pid), zap.Error(serr))
			return
		}
	}
	s.log.Info("signal passed on to the new process, which serves", zap.Stringer("signal", sig), zap.String("request", op), zap.Int("new_pid", pid))
}

// close ends the socketpair; nil-safe.
func (s *successor) close() {
	if s != nil {
		s.child.conn.Close()
	}
}

// msgBatcher splits items with descriptors over messages of at most
// maxFDsPerMsg descriptors.
type msgBatcher struct {
	msgs []*handoffMsg
	fds  [][]int
}

func (b *msgBatcher) add(fill func(*handoffMsg), fds ...int) {
	n := len(b.msgs)
	if n == 0 || len(b.fds[n-1])+len(fds) > maxFDsPerMsg {
		b.msgs = append(b.msgs, &handoffMsg{})
		b.fds = append(b.fds, nil)
		n++
	}
	fill(b.msgs[n-1])
	b.fds[n-1] = append(b.fds[n-1], fds...)
}

// send sends the messages as op, the last one marked.
func (b *msgBatcher) send(c *handoffConn, op string) error {
	if len(b.msgs) == 0 {
		b.msgs, b.fds = []*handoffMsg{{}}, [][]int{nil}
	}
	for i, m := range b.msgs {
		m.Op, m.Last = op, i == len(b.msgs)-1
		if err := c.send(m, b.fds[i]); err != nil {
			return err
		}
	}
	return nil
}

// upgradeChild is the new process, as its parent sees it.
type upgradeChild struct {
	cmd     *exec.Cmd
	conn    *handoffConn
	timeout time.Duration // to become ready
	exited  chan struct{}
	err     error // its exit status, once exited is closed
}

// startChild starts binary with this process's arguments, environment and
// standard streams, and its end of a socketpair as descriptor 3.
func startChild(binary string) (*upgradeChild, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "upgrade")
	defer theirs.Close() // the child has its own copy once started
	conn, err := newHandoffConn(fds[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, os.Args[1:]...)
	cmd.Env = append(envWithout(upgradeFDEnv), upgradeFDEnv+"=3")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	if err := cmd.Start(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	c := &upgradeChild{cmd: cmd, conn: conn, exited: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.exited) }()
	return c, nil
}

func (c *upgradeChild) pid() int { return c.cmd.Process.Pid }

// expect reads the next message, which must be op; a failed message, an
// exit or silence until deadline is the error.
func (c *upgradeChild) expect(op string, deadline time.Time) (*handoffMsg, error) {
	m, fds, err := c.conn.recv(deadline)
	closeFDs(fds) // the new process sends none
	if err != nil {
		return nil, c.why(err, deadline)
	}
	switch m.Op {
	case op:
		return m, nil
	case opFailed:
		return nil, &problemsError{msg: fmt.Sprintf("the new l4lb (pid %d) refused to start: %s", c.pid(), m.Error), problems: m.Problems}
	}
	return nil, fmt.Errorf("upgrade: the new l4lb sent %q, want %q", m.Op, op)
}

// why explains a failed read from the new process.
func (c *upgradeChild) why(err error, deadline time.Time) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("the new l4lb (pid %d) did not answer in time (it had %v to start; l4lb upgrade --timeout)", c.pid(), c.timeout)
	}
	select {
	case <-c.exited:
	case <-time.After(2 * time.Second):
		return fmt.Errorf("upgrade: reading from the new l4lb (pid %d): %w", c.pid(), err)
	}
	if c.err == nil {
		return fmt.Errorf("the new l4lb (pid %d) exited (status 0) before it took over", c.pid())
	}
	return fmt.Errorf("the new l4lb (pid %d) exited before it took over: %v", c.pid(), c.err)
}

// stop ends a new process that failed (it is this process's child).
func (c *upgradeChild) stop() {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Kill()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
		}
	}
	c.conn.Close()
}

// envWithout is this process's environment without key.
func envWithout(key string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// runningBinary is the path this process was started from, resolved now:
// an upgrade runs what is at that path then (a package update replaces
// the file, and /proc/self/exe would name the deleted one).
func runningBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return exe
}

// cmdUpgrade asks the running l4lb to upgrade to a new binary.
func cmdUpgrade(args []string, stdout, stderr io.Writer) int {
	f := newFlags("upgrade", stdout, stderr)
	socket := socketFlags(f)
	binary := f.String("binary", "", "the new l4lb binary (default: the path the running one was started from)")
	timeout := f.Duration("timeout", upgradeStartTimeout, "how long the new process may take to start, until it is ready")
	asJSON := f.Bool("json", false, "print the API's JSON answer")
	if code, ok := f.parse(args); !ok {
		return code
	}
	if !f.noArgs() {
		return 2
	}
	path, err := socket()
	if err != nil {
		fmt.Fprintln(stderr, "l4lb upgrade:", err)
		return 1
	}
	req := admin.UpgradeRequest{Timeout: timeout.String()}
	if *binary != "" {
		if req.Binary, err = filepath.Abs(*binary); err != nil {
			fmt.Fprintln(stderr, "l4lb upgrade:", err)
			return 1
		}
	}
	var res admin.UpgradeResult
	body, err := admin.Client{Socket: path, Timeout: *timeout + 2*time.Minute}.Do(context.Background(), "POST", "/upgrade", req, &res)
	return verdict("upgrade", body, err, func() bool { return res.OK }, func() { printUpgrade(stdout, stderr, res) }, *asJSON, stdout, stderr)
}

func printUpgrade(stdout, stderr io.Writer, res admin.UpgradeResult) {
	if res.Stopping {
		fmt.Fprintf(stderr, "upgrade cancelled; l4lb (pid %d) stops: %s\n", res.OldPID, res.Error)
		return
	}
	if !res.OK {
		fmt.Fprintf(stderr, "upgrade failed; l4lb (pid %d) keeps serving: %s\n", res.OldPID, res.Error)
		for _, p := range res.Problems {
			fmt.Fprintln(stderr, "  "+p)
		}
		return
	}
	fmt.Fprintf(stdout, "upgraded: pid %d -> %d (%s) in %.3fs\n", res.OldPID, res.PID, res.Binary, res.Seconds)
	fmt.Fprintf(stdout, "handed over: %d listening sockets, %d connections (%d flushed first, %d with their bytes in flight), %d UDP sessions (in %.3fs)\n",
		res.Listeners, res.Connections, res.Flushed, res.Piped, res.Sessions, res.HandoverSeconds)
	if res.Kept > 0 {
		fmt.Fprintf(stdout, "%d connections stay in pid %d until they end (drain_timeout at most)\n", res.Kept, res.OldPID)
	}
}
