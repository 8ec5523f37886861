// The old process's side: the running l4lb starts a new binary and hands
// it its sockets; it keeps serving, and says why, when the new one fails.
// new.go is the new process's side.

package upgrade

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// StartTimeout bounds the new process's start by default: loading its
// config, opening its new VIPs (an XDP program load among them) and saying
// ready (`l4lb upgrade --timeout`).
const StartTimeout = time.Minute

// Runtime is what the protocol asks of the running process's runtime (a
// *reconcile.Runtime) on either side.
type Runtime interface {
	UpgradeBlocker() string
	HoldXDP(hold bool)
	PauseAccepting(pause bool)
	ExportListeners() (*reconcile.ListenSockets, error)
	ExportBackends() []reconcile.BackendState
	BackendChanges() []l4.BackendChange
	DetachSessions() []*proxy.DetachedSession
	DetachConns(flush time.Duration, pipes bool, emit func([]*proxy.DetachedConn) error) (proxy.HandoverStats, error)
	AdoptConn(st proxy.ConnState, fds []int) error
	AdoptSession(st proxy.SessionState, fd int) error
	ResumeReading()
}

// Stops are the stop requests (SIGTERM, SIGINT, a stop passed on) of the
// running process. One that arrives while the new process starts cancels
// the upgrade and is put back, for the process to act on.
type Stops interface {
	// TakeStop waits for a stop and returns it; nil once done is closed.
	TakeStop(done <-chan struct{}) os.Signal
	// PutBack returns a stop taken for the process to act on.
	PutBack(sig os.Signal)
}

// Old is the running process, as the old side of the protocol sees it.
type Old struct {
	Log     *zap.Logger
	Runtime Runtime
	Stops   Stops
	// Exe is the binary an upgrade without one starts: the path this
	// process was started from (RunningBinary).
	Exe string
	// Admin and Metrics are passed on with the VIP sockets (nil: none).
	Admin   *admin.Server
	Metrics *net.TCPListener
	// Commit runs at the point of no return, with the new process's pid:
	// it becomes the service's main process and takes the admin socket
	// (Admin.Handover) and the metrics listener.
	Commit func(newPID int)
}

// errUpgradeCancelled: a stop asked of this process while the new one
// started; the stop is the loop's to act on once the upgrade is undone.
var errUpgradeCancelled = errors.New("upgrade cancelled: l4lb was asked to stop while the new process started")

// Run starts binary (default: Exe, read from disk again) and hands over
// to it; timeout (0: StartTimeout) bounds its start. On success the
// caller exits once the connections that stayed here end, passing the
// stops and reloads it still gets on to the successor; on failure
// nothing changed.
func (u *Old) Run(binary string, timeout time.Duration) (admin.UpgradeResult, *Successor) {
	start := time.Now()
	if timeout <= 0 {
		timeout = StartTimeout
	}
	res := admin.UpgradeResult{OldPID: os.Getpid(), Binary: binary}
	if res.Binary == "" {
		res.Binary = u.Exe
	}
	u.Log.Info("upgrade: starting the new binary", zap.String("binary", res.Binary))
	next, err := u.upgradeTo(&res, timeout)
	res.Seconds = time.Since(start).Seconds()
	if errors.Is(err, errUpgradeCancelled) {
		res.Error, res.Stopping = err.Error(), true
		u.Log.Warn("upgrade cancelled: the new process was stopped before it served; this one stops", zap.Int("new_pid", res.PID), zap.Error(err))
		return res, nil
	}
	if err != nil {
		res.Error = err.Error()
		var pe *problemsError
		if errors.As(err, &pe) {
			res.Error, res.Problems = pe.msg, pe.problems
		}
		u.Log.Error("upgrade failed: this process keeps serving", zap.String("binary", res.Binary), zap.Int("new_pid", res.PID),
			zap.Error(err), zap.Strings("problems", res.Problems))
		return res, nil
	}
	res.OK = true
	u.Log.Info("upgrade done: the new process serves; this one exits once what it kept has drained",
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
func (u *Old) upgradeTo(res *admin.UpgradeResult, timeout time.Duration) (*Successor, error) {
	if res.Binary == "" {
		return nil, errors.New("the path of the running binary is unknown: name one with --binary")
	}
	if why := u.Runtime.UpgradeBlocker(); why != "" {
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
	o := &oldSide{Old: u, child: child, res: res, deadline: time.Now().Add(timeout)}
	if err := o.run(); err != nil {
		o.rollback()
		return nil, err
	}
	return &Successor{child: child, log: u.Log}, nil
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

// oldSide is the running process during one upgrade.
type oldSide struct {
	*Old
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
	o.Runtime.HoldXDP(true) // the new process writes its config into the pinned maps now
	o.held = true
	if err := o.sendListeners(); err != nil {
		return err
	}
	if _, err := o.awaitStart(opReady); err != nil {
		return err
	}
	o.Log.Info("upgrade: the new process is ready; handing over", zap.Int("new_pid", o.child.pid()))
	// Both processes accept on the shared sockets now; this one stops.
	// Clients queue in the kernel's listen queue, which outlives either.
	o.Runtime.PauseAccepting(true)
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
	got, done := make(chan reply, 1), make(chan struct{})
	go func() {
		m, err := o.child.expect(op, o.deadline)
		got <- reply{m, err}
		close(done)
	}()
	sig := o.Stops.TakeStop(done)
	if sig == nil {
		r := <-got
		return r.m, r.err
	}
	o.Stops.PutBack(sig)
	_ = o.child.cmd.Process.Kill()
	<-got // the read ends with the new process
	return nil, fmt.Errorf("%w (%v)", errUpgradeCancelled, sig)
}

// handSessions hands every UDP session over (its backend socket and its
// backend), so that flows keep their backends; the new process reads the
// VIP sockets once it has them. Sessions it refuses end here.
func (o *oldSide) handSessions() error {
	all := o.Runtime.DetachSessions()
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
		o.Log.Warn("upgrade: UDP sessions the new config has no place for ended; their next datagram starts a new one", zap.Int("sessions", dropped))
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
	st, err := o.Runtime.DetachConns(handoverFlush, o.pipes, o.emitConns)
	o.res.Kept += st.Kept
	if st.Kept > 0 {
		o.Log.Warn("upgrade: connections not flushed in time (or still connecting) stay in this process and drain",
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
	ls, err := o.Runtime.ExportListeners()
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
	if o.Admin != nil {
		f, err := o.Admin.ListenerFile()
		if err != nil {
			return fmt.Errorf("admin socket: %w", err)
		}
		defer f.Close()
		b.add(func(m *handoffMsg) { m.Admin = o.Admin.Path() }, int(f.Fd()))
	}
	if o.Metrics != nil {
		f, err := o.Metrics.File()
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		defer f.Close()
		b.add(func(m *handoffMsg) { m.Metrics = o.Metrics.Addr().String() }, int(f.Fd()))
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
	all := o.Runtime.ExportBackends()
	for i := 0; ; {
		n := min(len(all)-i, backendsPerMsg)
		m := &handoffMsg{Op: opBackends, Backends: all[i : i+n], Last: i+n == len(all)}
		if i == 0 {
			m.Changes = o.Runtime.BackendChanges() // the run-time backend changes: with the first
		}
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
	o.Commit(o.child.pid())
	if err := o.child.conn.send(&handoffMsg{Op: opDone, Kept: o.res.Kept}, nil); err != nil {
		o.Log.Error("upgrade: the new process did not take the last message; it runs, this one exits", zap.Error(err))
		return nil
	}
	m, err := o.child.expect(opDone, time.Now().Add(10*time.Second))
	if err != nil {
		o.Log.Error("upgrade: no answer from the new process after the handover; it runs, this one exits", zap.Error(err))
		return nil
	}
	if !m.AdminTaken && o.Admin != nil {
		o.Log.Warn("upgrade: the new process binds another admin socket; this one's file stays until a later start clears it",
			zap.String("admin_socket", o.Admin.Path()))
	}
	return nil // the socketpair stays open: stops and reloads go through it (successor)
}

// rollback undoes what run did before it failed, and stops the new process.
func (o *oldSide) rollback() {
	o.child.stop()
	if o.paused {
		o.Runtime.PauseAccepting(false)
	}
	if o.held {
		o.Runtime.HoldXDP(false)
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
