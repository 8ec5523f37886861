// The new process's side of an upgrade: started by a running l4lb with
// its end of a socketpair, it takes that l4lb's sockets instead of
// binding, says ready, adopts what the old one hands over, then becomes
// the service's main process.

package upgrade

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
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// testExitAtEnv names a message on whose receipt a new process exits: the
// tests' way to kill it mid-handover.
const testExitAtEnv = "L4LB_TEST_UPGRADE_EXIT_AT"

// takeoverTimeout bounds the wait for each of the old process's messages
// (it flushes connections for a bounded time before it sends them).
const takeoverTimeout = 2 * time.Minute

// New is this process while it takes over from the old one.
type New struct {
	conn   *handoffConn
	exitAt string // testExitAtEnv
	// What the old process passed besides the VIP sockets, served once it
	// says done.
	adminLn   *net.UnixListener
	adminPath string
	metricsLn net.Listener
	metrics   string
	// changes are the old process's run-time backend changes.
	changes []l4.BackendChange
}

// BackendChanges returns the run-time backend changes the old process
// passed with its backends (after Listeners).
func (n *New) BackendChanges() []l4.BackendChange { return n.changes }

// FromEnv returns the upgrade this process was started for, or nil for an
// ordinary start. The variable is removed, so that this process's own
// upgrades do not pass it on.
func FromEnv() (*New, error) {
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
	return &New{conn: c, exitAt: os.Getenv(testExitAtEnv)}, nil
}

// Fail tells the old process why this one gives up (it then exits);
// nil-safe.
func (n *New) Fail(err error) {
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
	n.CloseExtras()
}

// Listeners says hello and receives the old process's sockets and what it
// knew of its backends.
func (n *New) Listeners() (*reconcile.ListenSockets, []reconcile.BackendState, error) {
	if err := n.conn.send(&handoffMsg{Op: opHello, PID: os.Getpid(), Pipes: true}, nil); err != nil {
		return nil, nil, err
	}
	ls := &reconcile.ListenSockets{TCP: map[string]int{}, UDP: map[string][]int{}}
	var backends []reconcile.BackendState
	deadline := time.Now().Add(takeoverTimeout)
	fail := func(err error) (*reconcile.ListenSockets, []reconcile.BackendState, error) {
		ls.Close()
		n.CloseExtras()
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
		n.changes = append(n.changes, m.Changes...)
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
func (n *New) takeListeners(m *handoffMsg, fds []int, ls *reconcile.ListenSockets) error {
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

// CloseExtras closes the admin and metrics sockets not served.
func (n *New) CloseExtras() {
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

// Heir is this process as the new side of the protocol sees it once it
// serves every VIP.
type Heir struct {
	Log     *zap.Logger
	Runtime Runtime
	// BecomeMain serves the admin API and metrics (on the sockets the old
	// process passed: AdminListener, MetricsListener) and tells the
	// service manager; it reports whether the passed admin socket is
	// served. It runs at the old process's done, or once it is gone.
	BecomeMain func() bool
	// Passed acts on a stop (stop true) or reload that the old process
	// passes on after the handover.
	Passed func(stop bool, sig os.Signal)
}

// TakeOver tells the old process this one serves every VIP, adopts what
// it hands over and, at its done, becomes the main process.
func (n *New) TakeOver(h Heir) {
	if err := n.conn.send(&handoffMsg{Op: opReady}, nil); err != nil {
		h.Log.Error("upgrade: the old process is gone; serving alone", zap.Error(err))
	}
	for {
		m, fds, err := n.conn.recv(time.Now().Add(takeoverTimeout))
		if err != nil {
			if !errors.Is(err, io.EOF) {
				h.Log.Error("upgrade: the old process stopped talking; serving alone", zap.Error(err))
			}
			h.BecomeMain()
			return
		}
		if n.exitAt != "" && m.Op == n.exitAt {
			os.Exit(3) // a test's new process dies in the middle of the handover
		}
		switch m.Op {
		case opSessions:
			_ = n.conn.send(&handoffMsg{Op: opTaken, Taken: h.adoptSessions(m.Sessions, fds)}, nil)
			if m.Last {
				h.Runtime.ResumeReading() // the sessions are in the table: datagrams find them
			}
		case opConns:
			_ = n.conn.send(&handoffMsg{Op: opTaken, Taken: h.adoptConns(m.Conns, fds)}, nil)
		case opDone:
			taken := h.BecomeMain()
			_ = n.conn.send(&handoffMsg{Op: opDone, AdminTaken: taken}, nil)
			h.Log.Info("upgrade: took over", zap.Int("kept_by_old", m.Kept))
			go h.heedPredecessor(n.conn)
			return
		default:
			closeFDs(fds)
			h.Log.Error("upgrade: unexpected message from the old process", zap.String("op", m.Op))
		}
	}
}

// AdminListener is the admin socket the old process passed, when it is
// the one at path (the caller serves it from now on); else nil.
func (n *New) AdminListener(path string) *net.UnixListener {
	if n.adminLn == nil || n.adminPath != path {
		return nil
	}
	ln := n.adminLn
	n.adminLn = nil
	return ln
}

// MetricsListener is the metrics listener the old process passed, when it
// serves addr (the caller serves it from now on); else nil.
func (n *New) MetricsListener(addr string) net.Listener {
	if n.metricsLn == nil || !sameListenAddr(n.metrics, addr) {
		return nil
	}
	ln := n.metricsLn
	n.metricsLn = nil
	return ln
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
func (h *Heir) adoptConns(states []proxy.ConnState, fds []int) []bool {
	taken := make([]bool, len(states))
	want := 0
	for i := range states {
		want += states[i].FDCount()
	}
	if len(fds) != want {
		closeFDs(fds)
		h.Log.Error("upgrade: a batch of connections came with the wrong number of descriptors", zap.Int("conns", len(states)), zap.Int("descriptors", len(fds)), zap.Int("want", want))
		return taken
	}
	refused := map[string]int{}
	for i, st := range states {
		mine := fds[:st.FDCount()]
		fds = fds[st.FDCount():]
		if err := h.Runtime.AdoptConn(st, mine); err != nil {
			closeFDs(mine)
			refused[st.VIP+": "+err.Error()]++
			continue
		}
		taken[i] = true
	}
	for why, n := range refused {
		h.Log.Warn("upgrade: connections left to the old process", zap.Int("connections", n), zap.String("why", why))
	}
	return taken
}

// adoptSessions adopts a batch of UDP sessions (one descriptor each) and
// says which it took.
func (h *Heir) adoptSessions(states []proxy.SessionState, fds []int) []bool {
	taken := make([]bool, len(states))
	if len(fds) != len(states) {
		closeFDs(fds)
		h.Log.Error("upgrade: a batch of sessions came with the wrong number of sockets", zap.Int("sessions", len(states)), zap.Int("sockets", len(fds)))
		return taken
	}
	refused := map[string]int{}
	for i, st := range states {
		if err := h.Runtime.AdoptSession(st, fds[i]); err != nil {
			refused[st.VIP+": "+err.Error()]++
			continue
		}
		taken[i] = true
	}
	for why, n := range refused {
		h.Log.Warn("upgrade: UDP sessions not adopted", zap.Int("sessions", n), zap.String("why", why))
	}
	return taken
}
