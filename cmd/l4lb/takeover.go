// The new process's side of an upgrade: started by a running l4lb with
// its end of a socketpair, it takes that l4lb's sockets instead of
// binding, says ready, adopts what the old one hands over, then becomes
// the service's main process.

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// testExitAt, from L4LB_TEST_UPGRADE_EXIT_AT, makes a new process exit on
// receiving that message: the tests' way to kill it mid-handover.
var testExitAt = os.Getenv("L4LB_TEST_UPGRADE_EXIT_AT")

// takeoverTimeout bounds the wait for each of the old process's messages
// (it flushes connections for a bounded time before it sends them).
const takeoverTimeout = 2 * time.Minute

// newSide is this process while it takes over from the old one.
type newSide struct {
	conn *handoffConn
	// What the old process passed besides the VIP sockets, served once it
	// says done.
	adminLn   *net.UnixListener
	adminPath string
	metricsLn net.Listener
	metrics   string
}

// takeoverFromEnv returns the upgrade this process was started for, or nil
// for an ordinary start. The variable is removed, so that this process's
// own upgrades do not pass it on.
func takeoverFromEnv() (*newSide, error) {
	v, ok := os.LookupEnv(upgradeFDEnv)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(upgradeFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: not a descriptor", upgradeFDEnv, v)
	}
	c, err := newHandoffConn(fd)
	if err != nil {
		return nil, err
	}
	return &newSide{conn: c}, nil
}

// fail tells the old process why this one gives up (it then exits).
func (n *newSide) fail(err error) {
	if n == nil {
		return
	}
	m := &handoffMsg{Op: opFailed, Error: err.Error()}
	var ce *config.Error
	if errors.As(err, &ce) {
		m.Error = "config invalid"
		for _, p := range ce.Problems {
			m.Problems = append(m.Problems, p.String())
		}
	}
	_ = n.conn.send(m, nil)
	n.conn.Close()
	n.closeExtras()
}

// listeners says hello and receives the old process's sockets and what it
// knew of its backends.
func (n *newSide) listeners() (*reconcile.ListenSockets, []reconcile.BackendState, error) {
	if err := n.conn.send(&handoffMsg{Op: opHello, PID: os.Getpid(), Pipes: true}, nil); err != nil {
		return nil, nil, err
	}
	ls := &reconcile.ListenSockets{TCP: map[string]int{}, UDP: map[string][]int{}}
	var backends []reconcile.BackendState
	deadline := time.Now().Add(takeoverTimeout)
	fail := func(err error) (*reconcile.ListenSockets, []reconcile.BackendState, error) {
		ls.Close()
		n.closeExtras()
		return nil, nil, err
	}
	for op := opListeners; ; {
		m, fds, err := n.conn.recv(deadline)
		if err == nil && m.Op != op {
			closeFDs(fds)
			err = fmt.Errorf("upgrade: got %q, want %q", m.Op, op)
		}
		if err == nil && op == opListeners {
			err = n.takeListeners(m, fds, ls)
		}
		if err != nil {
			return fail(err)
		}
		backends = append(backends, m.Backends...)
		switch {
		case m.Last && op == opListeners:
			op = opBackends
		case m.Last:
			return ls, backends, nil
		}
	}
}

// takeListeners files one listeners message's descriptors, in the order
// the old process put them.
func (n *newSide) takeListeners(m *handoffMsg, fds []int, ls *reconcile.ListenSockets) error {
	want := len(m.TCP)
	for _, g := range m.UDP {
		want += g.N
	}
	if m.Admin != "" {
		want++
	}
	if m.Metrics != "" {
		want++
	}
	if len(fds) != want {
		closeFDs(fds)
		return fmt.Errorf("upgrade: %d descriptors for %d sockets", len(fds), want)
	}
	for _, key := range m.TCP {
		ls.TCP[key], fds = fds[0], fds[1:]
	}
	for _, g := range m.UDP {
		ls.UDP[g.Key], fds = fds[:g.N:g.N], fds[g.N:]
	}
	if m.Admin != "" {
		f := os.NewFile(uintptr(fds[0]), "admin")
		fds = fds[1:]
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("admin socket: %w", err)
		}
		n.adminLn, n.adminPath = ln.(*net.UnixListener), m.Admin
	}
	if m.Metrics != "" {
		f := os.NewFile(uintptr(fds[0]), "metrics")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		n.metricsLn, n.metrics = ln, m.Metrics
	}
	return nil
}

// closeExtras closes the admin and metrics sockets not served.
func (n *newSide) closeExtras() {
	if n.adminLn != nil {
		n.adminLn.SetUnlinkOnClose(false) // the old process still serves the file
		n.adminLn.Close()
		n.adminLn = nil
	}
	if n.metricsLn != nil {
		n.metricsLn.Close()
		n.metricsLn = nil
	}
}

// takeOver tells the old process this one serves every VIP, adopts what it
// hands over and, at its done, serves the admin API and metrics and tells
// the service manager it is the main process now.
func (d *daemon) takeOver(cfg *config.Config) {
	n := d.up
	if err := n.conn.send(&handoffMsg{Op: opReady}, nil); err != nil {
		d.log.Error("upgrade: the old process is gone; serving alone", zap.Error(err))
	}
	for {
		m, fds, err := n.conn.recv(time.Now().Add(takeoverTimeout))
		if err != nil {
			if !errors.Is(err, io.EOF) {
				d.log.Error("upgrade: the old process stopped talking; serving alone", zap.Error(err))
			}
			d.becomeMain(cfg)
			return
		}
		if testExitAt != "" && m.Op == testExitAt {
			os.Exit(3) // a test's new process dies in the middle of the handover
		}
		switch m.Op {
		case opSessions:
			_ = n.conn.send(&handoffMsg{Op: opTaken, Taken: d.adoptSessions(m.Sessions, fds)}, nil)
			if m.Last {
				d.rt.ResumeReading() // the sessions are in the table: datagrams find them
			}
		case opConns:
			_ = n.conn.send(&handoffMsg{Op: opTaken, Taken: d.adoptConns(m.Conns, fds)}, nil)
		case opDone:
			taken := d.becomeMain(cfg)
			_ = n.conn.send(&handoffMsg{Op: opDone, AdminTaken: taken}, nil)
			d.log.Info("upgrade: took over", zap.Int("kept_by_old", m.Kept))
			go d.heedPredecessor(n.conn)
			return
		default:
			closeFDs(fds)
			d.log.Error("upgrade: unexpected message from the old process", zap.String("op", m.Op))
		}
	}
}

// heedPredecessor takes the stops and reloads the old process passes on
// (it got them during the upgrade, or while it drains what it kept) until
// it exits and the socketpair closes.
func (d *daemon) heedPredecessor(c *handoffConn) {
	defer c.Close()
	for {
		m, fds, err := c.recv(time.Time{})
		if err != nil {
			return
		}
		closeFDs(fds)
		sig := passedOn{name: m.Signal, pid: m.PID}
		switch m.Op {
		case opStop:
			d.log.Info("the previous l4lb passed a stop on", zap.Stringer("signal", sig))
			offer(d.sigs.passed, sig)
		case opReload:
			d.log.Info("the previous l4lb passed a reload on", zap.Stringer("signal", sig))
			offer(d.sigs.reload, sig)
		default:
			d.log.Error("upgrade: unexpected message from the old process", zap.String("op", m.Op))
		}
	}
}

// becomeMain serves the admin API and metrics (on the sockets the old
// process passed, when the config still names them) and tells the
// service manager; it reports whether the passed admin socket is served.
func (d *daemon) becomeMain(cfg *config.Config) bool {
	n := d.up
	taken := false
	if p := cfg.Global.AdminSocket; p != "" {
		var err error
		if n.adminLn != nil && n.adminPath == p {
			d.admin, err = admin.ServeListener(n.adminLn, p, d, d.log.Named("admin"))
			n.adminLn, taken = nil, err == nil
		} else {
			d.admin, err = admin.Serve(p, d, d.log.Named("admin"))
		}
		if err != nil {
			d.log.Error("upgrade: admin socket not served", zap.String("admin_socket", p), zap.Error(err))
		}
	}
	if a := cfg.Global.MetricsListen; a != "" {
		var ln net.Listener
		if n.metricsLn != nil && sameListenAddr(n.metrics, a) {
			ln, n.metricsLn = n.metricsLn, nil
		}
		var err error
		if d.metrics, d.metricsLn, err = startMetrics(a, ln, d, d.log.Named("metrics")); err != nil {
			d.log.Error("upgrade: metrics not served", zap.String("metrics_listen", a), zap.Error(err))
		}
	}
	n.closeExtras()
	d.rt.ResumeReading() // also when the old process sent no sessions (it died)
	d.tellManager(d.notify.readyAsMain(os.Getpid()))
	return taken
}

// sameListenAddr reports whether a listener bound at bound serves the
// configured address want.
func sameListenAddr(bound, want string) bool {
	if bound == want {
		return true
	}
	b, err1 := net.ResolveTCPAddr("tcp", bound)
	w, err2 := net.ResolveTCPAddr("tcp", want)
	return err1 == nil && err2 == nil && b.Port == w.Port && (b.IP.Equal(w.IP) || (w.IP == nil && b.IP.IsUnspecified()))
}

// adoptConns adopts a batch of connections (their descriptors in order,
// as each one's FDCount says) and says which it took; the refused ones'
// descriptors are closed here (the old process keeps them).
func (d *daemon) adoptConns(states []proxy.ConnState, fds []int) []bool {
	taken := make([]bool, len(states))
	want := 0
	for i := range states {
		want += states[i].FDCount()
	}
	if len(fds) != want {
		closeFDs(fds)
		d.log.Error("upgrade: a batch of connections came with the wrong number of descriptors", zap.Int("conns", len(states)), zap.Int("descriptors", len(fds)), zap.Int("want", want))
		return taken
	}
	refused := map[string]int{}
	for i, st := range states {
		mine := fds[:st.FDCount()]
		fds = fds[st.FDCount():]
		if err := d.rt.AdoptConn(st, mine); err != nil {
			closeFDs(mine)
			refused[st.VIP+": "+err.Error()]++
			continue
		}
		taken[i] = true
	}
	for why, n := range refused {
		d.log.Warn("upgrade: connections left to the old process", zap.Int("connections", n), zap.String("why", why))
	}
	return taken
}

// adoptSessions adopts a batch of UDP sessions (one descriptor each) and
// says which it took.
func (d *daemon) adoptSessions(states []proxy.SessionState, fds []int) []bool {
	taken := make([]bool, len(states))
	if len(fds) != len(states) {
		closeFDs(fds)
		d.log.Error("upgrade: a batch of sessions came with the wrong number of sockets", zap.Int("sessions", len(states)), zap.Int("sockets", len(fds)))
		return taken
	}
	refused := map[string]int{}
	for i, st := range states {
		if err := d.rt.AdoptSession(st, fds[i]); err != nil {
			refused[st.VIP+": "+err.Error()]++
			continue
		}
		taken[i] = true
	}
	for why, n := range refused {
		d.log.Warn("upgrade: UDP sessions not adopted", zap.Int("sessions", n), zap.String("why", why))
	}
	return taken
}
