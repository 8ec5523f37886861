// TCP VIP service: accept loop, backend selection with retries, drain.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// Settings are a TCP VIP's tunables. A service holds them behind an atomic
// pointer: a reload swaps in new ones and established connections keep the
// values they started with.
type Settings struct {
	Name           string
	ConnectTimeout time.Duration // 0 = 2s
	Retries        int           // extra backends to try after a failed connect
	IdleTimeout    time.Duration // 0 = none
	KeepAlive      time.Duration // TCP keepalive idle on both sides; 0 = off
	MaxConns       int           // 0 = unlimited
	ProxyProtocol  int           // 0 = off, 1 or 2 = PROXY header version sent to backends
	// AffinityTimeout > 0 sends a client address's new connections to the
	// backend it used last, while that backend is eligible, until the pin
	// has been unused this long.
	AffinityTimeout time.Duration
	// MeasureConnect reads each backend connect's handshake RTT from the
	// kernel (one getsockopt) for Observer.ConnectOK; off, ConnectOK gets 0.
	MeasureConnect bool
}

// Observer learns the outcome of every connect to a backend: the runtime
// feeds passive health marks and handshake RTTs from it. Calls are made on
// connection goroutines and must not block.
type Observer interface {
	ConnectOK(b *l4.Backend, handshake time.Duration)
	ConnectFailed(b *l4.Backend, err error)
}

// ServiceStats are a VIP's cumulative counters.
type ServiceStats struct {
	Accepted       atomic.Uint64
	Active         atomic.Int64
	NoBackend      atomic.Uint64 // clients closed because no backend could be reached
	ConnectFails   atomic.Uint64
	AcceptErrors   atomic.Uint64
	IdleClosed     atomic.Uint64
	LocalErrors    atomic.Uint64 // backend sockets or pipes refused for lack of local resources
	PipelessCopies atomic.Uint64 // chunks copied through user space: no pipe to be had
	LimitWaits     atomic.Uint64 // times the accept loop waited at max_conns or the process budget
}

// TCPService proxies one TCP VIP.
type TCPService struct {
	key   l4.VIPKey
	ln    *net.TCPListener
	snaps *snapshot.Store
	pipes *PipePool
	log   *zap.Logger
	obs   Observer

	settings atomic.Pointer[Settings]
	// listenKeepAlive is what the listener applies to accepted sockets.
	listenKeepAlive time.Duration
	affinity        atomic.Pointer[conntrack.Affinity] // nil = no affinity
	limit           limiter
	budget          *ConnBudget // process-wide; nil = none
	self            *Listeners  // process-wide; nil = none
	ev              *evService  // set when the connections run on event loops
	wildcard        bool        // listening on 0.0.0.0 or ::: each connection's VIP address is read from its socket
	stop            closer      // closed by Close: wakes an accept loop waiting for budget
	Stats           ServiceStats

	pressure atomic.Int64 // unix ns of the last local-resource failure; 0 = none

	warnings  rateLog   // per-connection failures
	acceptLog rateLog   // accept failures (every 5s)
	limitLog  rateLog   // waits at a connection limit (every 5s)
	copyBufs  sync.Pool // *[]byte for connections that cannot get a pipe

	wg         sync.WaitGroup // connection goroutines
	serving    atomic.Bool    // Serve ran: Close waits for its loop
	acceptDone chan struct{}

	mu    sync.Mutex
	conns map[*tcpConn]struct{}
}

// TCPConfig builds a TCPService.
type TCPConfig struct {
	Listener  *net.TCPListener
	Snapshots *snapshot.Store
	Pipes     *PipePool
	Settings  Settings
	Log       *zap.Logger // nil = no logs
	Observer  Observer    // nil = none
	Budget    *ConnBudget // shared by all VIPs; nil = no process-wide cap
	// Self is every address l4lb listens on (shared by all VIPs): a
	// backend connect that lands on one is failed. nil = not checked.
	Self *Listeners
	// Loops, when set, run the service's connections on event loops
	// instead of a goroutine pair per connection.
	Loops *Loops
}

// NewTCPService makes a service; Serve starts it.
func NewTCPService(cfg TCPConfig) *TCPService {
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	s := &TCPService{
		key:        l4.VIPKey{Addr: cfg.Listener.Addr().(*net.TCPAddr).AddrPort(), Proto: l4.TCP},
		ln:         cfg.Listener,
		snaps:      cfg.Snapshots,
		pipes:      cfg.Pipes,
		log:        log,
		obs:        cfg.Observer,
		acceptDone: make(chan struct{}),
		conns:      make(map[*tcpConn]struct{}),
	}
	s.limit.init()
	s.copyBufs.New = func() any { b := make([]byte, copyBufSize); return &b }
	s.acceptLog.every = 5 * time.Second
	s.limitLog.every = 5 * time.Second
	s.budget, s.self = cfg.Budget, cfg.Self
	s.wildcard = s.key.Addr.Addr().IsUnspecified()
	if cfg.Loops != nil {
		ev, err := newEvService(s, cfg.Loops)
		if err != nil {
			log.Error("event loops unavailable for this VIP: it runs on goroutines", zap.Error(err))
		} else {
			s.ev = ev
		}
	}
	s.stop.ch = make(chan struct{})
	s.listenKeepAlive = cfg.Settings.KeepAlive
	s.Update(cfg.Settings)
	return s
}

// Key returns the VIP's listen address and protocol.
func (s *TCPService) Key() l4.VIPKey { return s.key }

// Settings returns the settings new connections use.
func (s *TCPService) Settings() Settings { return *s.settings.Load() }

// Update swaps in new settings for new connections.
func (s *TCPService) Update(st Settings) {
	if st.ConnectTimeout <= 0 {
		st.ConnectTimeout = 2 * time.Second
	}
	old := s.settings.Swap(&st)
	s.limit.setMax(st.MaxConns)
	if old == nil || old.AffinityTimeout != st.AffinityTimeout {
		s.setAffinity(st.AffinityTimeout)
	}
}

// SetDeferAccept sets or clears TCP_DEFER_ACCEPT on the running listener
// (a reload that changes defer_accept): the socket keeps listening, and
// handshakes completing from then on follow the new value. It must not
// race with Close; the runtime only updates VIPs it keeps.
func (s *TCPService) SetDeferAccept(on bool) error {
	if s.ev != nil {
		if s.ev.closed.Load() {
			return net.ErrClosed
		}
		return setDeferAccept(s.ev.fd, on) // the loops own the listener's socket
	}
	raw, err := s.ln.SyscallConn()
	if err != nil {
		return err
	}
	return deferAcceptRaw(raw, on)
}

// setAffinity replaces the pin table; a changed timeout starts a fresh one.
func (s *TCPService) setAffinity(timeout time.Duration) {
	var next *conntrack.Affinity
	if timeout > 0 {
		a, err := conntrack.NewAffinity(conntrack.AffinityOptions{Timeout: timeout})
		if err != nil {
			s.log.Error("affinity table", zap.Error(err))
		} else if err := a.Start(context.Background()); err == nil {
			next = a
		}
	}
	if old := s.affinity.Swap(next); old != nil {
		_ = old.Close()
	}
}

// Serve runs the accept loop until the listener is closed.
func (s *TCPService) Serve() {
	s.serving.Store(true)
	defer close(s.acceptDone)
	if s.ev != nil {
		s.serveLoops()
		return
	}
	var backoff time.Duration
	for {
		if !s.limit.acquire(s.vipFull) {
			return
		}
		if s.budget != nil && !s.budget.acquire(s.stop.ch, s.processFull) {
			s.limit.release()
			return
		}
		s.waitPressure()
		c, err := s.ln.AcceptTCP()
		if err != nil {
			s.releaseSlots()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.Stats.AcceptErrors.Add(1)
			backoff = acceptBackoff(err, backoff)
			s.acceptLog.warn(s.log, "accept failed", zap.Stringer("listen", s.key), zap.Error(err), zap.Duration("backoff", backoff))
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.Stats.Accepted.Add(1)
		s.wg.Add(1)
		go s.handle(c)
	}
}

// vipFull is called when the accept loop waits at max_conns.
func (s *TCPService) vipFull() {
	s.Stats.LimitWaits.Add(1)
	s.limitLog.warn(s.log, "connection limit reached: max_conns; new clients wait in the listen backlog",
		zap.Stringer("listen", s.key), zap.Int("max_conns", s.settings.Load().MaxConns))
}

// processFull is called when the accept loop waits for the process-wide
// connection budget (from the open-file limit).
func (s *TCPService) processFull() {
	s.Stats.LimitWaits.Add(1)
	s.limitLog.warn(s.log, "connection limit reached: the process-wide budget from the open-file limit; new clients wait in the listen backlog",
		zap.Stringer("listen", s.key), zap.Int("max_connections", s.budget.Cap()))
}

// copyBufSize is the user-space buffer a connection copies through while no
// pipe can be opened.
const copyBufSize = 32 << 10

// localFailure reports whether a connect failed for lack of this host's
// resources (descriptors, memory, buffers, ephemeral ports) rather than
// because of the backend: such failures must not mark backends down.
func localFailure(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.EADDRNOTAVAIL:
		return true
	}
	return false
}

// rateLog logs a warning at most once a second from connection goroutines.
func (s *TCPService) rateLog(msg string, fields ...zap.Field) {
	s.warnings.warn(s.log, msg, append(fields, zap.Stringer("listen", s.key))...)
}

// acceptBackoff grows the pause after an accept error: out of descriptors
// or memory, retrying at once would spin; a lone aborted handshake needs
// no pause at all.
func acceptBackoff(err error, prev time.Duration) time.Duration {
	var errno syscall.Errno
	if errors.As(err, &errno) && (errno == unix.ECONNABORTED || errno == unix.EPERM) {
		return 0
	}
	if prev == 0 {
		return 5 * time.Millisecond
	}
	return min(2*prev, time.Second)
}

// handle sets one client connection up and hands it to two fresh pump
// goroutines; handle's own goroutine, whose stack grew while dialing, exits
// so an idle connection keeps only small stacks.
func (s *TCPService) handle(client *net.TCPConn) {
	s.Stats.Active.Add(1)
	st := s.settings.Load()
	flow := l4.Flow{
		Src:   client.RemoteAddr().(*net.TCPAddr).AddrPort(),
		Dst:   client.LocalAddr().(*net.TCPAddr).AddrPort(),
		Proto: l4.TCP,
	}
	backend, target, err := s.connect(&flow, st)
	if err != nil {
		s.Stats.NoBackend.Add(1)
		s.rateLog("no usable backend for VIP: client reset", zap.Stringer("client", flow.Src), zap.Error(err))
		_ = client.SetLinger(0)
		_ = client.Close()
		s.connDone()
		return
	}
	if st.KeepAlive != s.listenKeepAlive {
		setKeepAlive(client, st.KeepAlive) // changed by a reload since the listener opened
	}
	c := &tcpConn{svc: s, client: client, backend: backend, target: target, opened: time.Now(), idle: st.IdleTimeout}
	if err := s.sendProxyHeader(c, st.ProxyProtocol, &flow); err != nil || !s.track(c) {
		c.abort(true, true) // the backend failed, or the service is shutting down
		s.release(target)
		s.connDone()
		return
	}
	c.start()
}

// release ends a flow's live count on b. An unmatched release is a bug
// somewhere: it is logged (and counted on the backend), never hidden.
func (s *TCPService) release(b *l4.Backend) {
	if !b.Release() {
		s.log.Error("live-flow count underflow: a flow was released twice", zap.String("backend", string(b.ID)), zap.Uint64("underflows", b.Underflows()))
	}
}

// connDone is the end of a connection's accounting: its max_conns slot,
// the drain wait group and the active count.
func (s *TCPService) connDone() {
	s.Stats.Active.Add(-1)
	s.releaseSlots()
	s.wg.Done()
}

// releaseSlots gives back a connection's max_conns slot and budget slot.
func (s *TCPService) releaseSlots() {
	s.limit.release()
	if s.budget != nil {
		s.budget.release()
	}
}

// connect picks a backend and connects to it, trying up to st.Retries
// others after a refusal or timeout. Nothing has been read from the client
// yet, so a retry is invisible to it. The returned backend has one live
// flow acquired for the connection.
func (s *TCPService) connect(flow *l4.Flow, st *Settings) (*net.TCPConn, *l4.Backend, error) {
	snap := s.snaps.Load()
	aff := s.affinity.Load()
	var tried balance.Tried
	lastErr := balance.ErrNoBackend
	for attempt := 0; attempt <= st.Retries; attempt++ {
		b := s.pick(snap, aff, flow, &tried)
		if b == nil {
			break
		}
		tried.Add(b)
		conn, err := s.dialLocalRetry(b, st)
		if err == nil {
			b.Stats.Flows.Add(1)
			if aff != nil {
				_ = aff.Set(s.key, flow.Src.Addr(), b)
			}
			return conn, b, nil
		}
		s.release(b)
		lastErr = fmt.Errorf("backend %s: %w", b.ID, err)
		if localFailure(err) {
			// Still out of descriptors, memory or ports after waiting:
			// every other backend would fail the same way.
			break
		}
	}
	return nil, nil, lastErr
}

// dialLocalRetry dials b; while the dial fails for lack of local resources
// it waits and tries again until connect_timeout, and meanwhile holds the
// accept loop, so that clients queue in the listen backlog instead of
// being accepted and reset.
func (s *TCPService) dialLocalRetry(b *l4.Backend, st *Settings) (*net.TCPConn, error) {
	deadline := time.Now().Add(st.ConnectTimeout)
	pause := 10 * time.Millisecond
	for {
		conn, err := s.dial(b, st)
		if err == nil || !localFailure(err) {
			return conn, err
		}
		s.Stats.LocalErrors.Add(1)
		s.pressure.Store(time.Now().UnixNano())
		s.rateLog("cannot open a backend connection: local resources exhausted; accepting paused", zap.Error(err))
		if time.Now().Add(pause).After(deadline) {
			return nil, err
		}
		time.Sleep(pause)
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// waitPressure holds the accept loop while connections recently failed to
// get local resources.
func (s *TCPService) waitPressure() {
	for {
		last := s.pressure.Load()
		if last == 0 || time.Since(time.Unix(0, last)) > 100*time.Millisecond {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pick returns the client's pinned backend on a first attempt when it is
// still eligible, else the balancer's choice; either way with a live flow
// acquired.
func (s *TCPService) pick(snap *snapshot.Snapshot, aff *conntrack.Affinity, flow *l4.Flow, tried *balance.Tried) *l4.Backend {
	if aff != nil && tried.Len() == 0 {
		if b, ok := aff.Get(s.key, flow.Src.Addr()); ok && b.Eligible() {
			b.Acquire()
			return b
		}
	}
	return snap.Pick(flow, tried)
}

func (s *TCPService) dial(b *l4.Backend, st *Settings) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: st.ConnectTimeout, KeepAliveConfig: keepAliveConfig(st.KeepAlive)}
	if st.KeepAlive <= 0 {
		d.KeepAlive = -1
	}
	start := time.Now()
	tc, err := s.dialChecked(&d, b)
	if err != nil {
		if !localFailure(err) { // only the backend's own failures mark it
			b.Stats.ConnectFails.Add(1)
			s.Stats.ConnectFails.Add(1)
			if s.obs != nil {
				s.obs.ConnectFailed(b, err)
			}
		}
		return nil, err
	}
	if s.obs != nil {
		var rtt time.Duration
		if st.MeasureConnect {
			rtt = handshakeRTT(tc, time.Since(start))
		}
		s.obs.ConnectOK(b, rtt)
	}
	return tc, nil
}

// dialChecked connects to b unless b is one of l4lb's own listeners.
func (s *TCPService) dialChecked(d *net.Dialer, b *l4.Backend) (*net.TCPConn, error) {
	if s.self.wouldLoop(l4.TCP, b.Addr) {
		return nil, s.selfConnect(b)
	}
	tc, err := d.DialTCP(context.Background(), "tcp", netip.AddrPort{}, b.Addr)
	if err == nil && s.self.loops(l4.TCP, tc.LocalAddr().(*net.TCPAddr).AddrPort(), b.Addr) {
		_ = tc.SetLinger(0)
		_ = tc.Close()
		return nil, s.selfConnect(b)
	}
	return tc, err
}

// selfConnect is the failure of a connect that would loop into l4lb.
func (s *TCPService) selfConnect(b *l4.Backend) error {
	err := fmt.Errorf("%s: %w", b.Addr, errSelfConnect)
	s.rateLog("backend refused: it would loop into l4lb", zap.String("backend", string(b.ID)), zap.Error(err))
	return err
}

// track registers a connection for drain and forced close; it refuses once
// the service is shutting down (conns is nil then).
func (s *TCPService) track(c *tcpConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// untrack forgets a connection that ended.
func (s *TCPService) untrack(c *tcpConn) {
	s.mu.Lock()
	if s.conns != nil {
		delete(s.conns, c)
	}
	s.mu.Unlock()
}

// Close stops accepting; established connections continue.
func (s *TCPService) Close() error {
	s.stop.close()
	var err error
	if s.ev != nil {
		s.closeLoops()
	} else {
		err = s.ln.Close()
	}
	if s.serving.Load() {
		<-s.acceptDone
	}
	s.stopAffinity()
	return err
}

// Affinity returns the client pin table, or nil when affinity is off.
func (s *TCPService) Affinity() *conntrack.Affinity { return s.affinity.Load() }

// Drain stops accepting and waits for connections to end until ctx is done,
// then resets the rest. It returns how many were reset.
func (s *TCPService) Drain(ctx context.Context) int {
	_ = s.Close()
	s.limit.stop()
	if s.ev != nil {
		return s.drainLoops(ctx)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return 0
	case <-ctx.Done():
	}
	n := s.ResetWhere(func(*l4.Backend) bool { return true })
	<-done
	return n
}

// stopAffinity ends the pin table's sweeper.
func (s *TCPService) stopAffinity() {
	if a := s.affinity.Swap(nil); a != nil {
		_ = a.Close()
	}
}

// ResetWhere resets the connections whose backend matches (on_down = reset,
// forced shutdown) and returns how many it reset.
func (s *TCPService) ResetWhere(match func(*l4.Backend) bool) int {
	if s.ev != nil {
		return s.resetWhereLoops(match)
	}
	s.mu.Lock()
	var victims []*tcpConn
	for c := range s.conns {
		if match(c.target) {
			victims = append(victims, c)
		}
	}
	s.mu.Unlock()
	for _, c := range victims {
		c.abort(true, true)
	}
	return len(victims)
}

// Conns returns the number of proxied connections in progress.
func (s *TCPService) Conns() int {
	if s.ev != nil {
		return int(s.ev.live.Load())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
