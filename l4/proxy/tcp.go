// TCP VIP service: settings, limits, drain and reset; its connections run
// on the event loops (evaccept.go, evconn.go).

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
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// Settings are a TCP VIP's tunables. A service holds them behind an atomic
// pointer: a reload swaps in new ones and established connections keep the
// values they started with.
type Settings struct {
	Name           string
	ConnectTimeout time.Duration // 0 = 2s
	Retries        int           // extra backends to try after a failed connect
	// RetryOnReset: when a backend that accepted and then reset (or
	// closed) before sending a byte is retried under Retries (evretry.go).
	RetryOnReset  l4.RetryOnReset
	IdleTimeout   time.Duration   // 0 = none
	KeepAlive     time.Duration   // TCP keepalive idle on both sides; 0 = off
	MaxConns      int             // 0 = unlimited
	ProxyProtocol l4.ProxyVersion // PROXY header sent to backends; ProxyOff = none
	// AppProtocol is the application protocol the VIP declares; features
	// that read its framing check it (AppNone: opaque bytes).
	AppProtocol l4.AppProtocol
	// AcceptProxy makes every client send a PROXY header first
	// (AcceptProxyV1, V2 or Any; Off = none), within ConnectTimeout, from a
	// source in AcceptProxyFrom; its source address then replaces the
	// client's for the pick, affinity, the log line, explain and the
	// header sent on. Any other connection is reset, counted, never
	// forwarded (evheader.go).
	AcceptProxy     l4.ProxyAccept
	AcceptProxyFrom []netip.Prefix
	// FirstByteTimeout > 0 closes a client that has sent nothing (after
	// its PROXY header, if one is due) this long after accept, before any
	// backend is picked (evpreread.go); 0 = off.
	FirstByteTimeout time.Duration
	// QueueTimeout is how long a new connection waits, holding its
	// max_conns slot, when every backend is at its cap (Backend.Full):
	// waiting connections are served in arrival order as backends free
	// slots, and reset when it runs out (evqueue.go); 0 = reset at once.
	QueueTimeout time.Duration
	// FailoverHold > 0: a new connection that finds no eligible backend
	// (or whose connects failed on every backend it tried) waits up to
	// this long in the same queue, nothing dialed, and is served in
	// arrival order by the first backend a new snapshot brings
	// (evhold.go); past it, or past the hold's bound (MaxConns, else
	// maxHeld), it is reset as without the hold. 0 = off.
	FailoverHold time.Duration
	// StallTimeout > 0 watches the service's open connections for
	// backends that stop answering (stallwatch.go): a backend whose
	// connections wait this long for a byte back, none answering since,
	// is reported degraded to a plane.StallObserver; 0 = off (no watch).
	StallTimeout time.Duration
	// KernelForward moves an established connection into the kernel
	// (TCPConfig.Kernel) once nothing it read waits, when it needs no
	// byte in user space (no AppProtocol, no StallTimeout).
	KernelForward bool
	// queuePoll overrides how often a waiting connection looks for room
	// itself (0 = queuePoll): tests turn it off to prove that the wake-ups
	// on release and publish are what serve the queue.
	queuePoll time.Duration
	// AffinityTimeout > 0 sends a client address's new connections to the
	// backend it used last, while that backend is eligible, until the pin
	// has been unused this long.
	AffinityTimeout time.Duration
	// Access is the VIP's allow/deny list (nil = everyone) and
	// ClientLimits its per-client limits (MaxOpen: max_conns_per_client,
	// Rate: conn_rate_per_client), checked before any backend is chosen,
	// on the client address (the PROXY header's, when one is due). A
	// refused client is reset. Connections open when a reload turns a
	// limit on are not counted against it.
	Access       *guard.ACL
	ClientLimits guard.Limits
	// MeasureConnect reads each backend connect's handshake RTT from the
	// kernel (one getsockopt) for Observer.ConnectOK; off, ConnectOK gets 0.
	MeasureConnect bool
	// LogConnections writes one info line when a connection ends (see
	// connlog.go), at most LogRate a second for the service (0 = no limit;
	// the service's current value, while LogConnections is the one the
	// connection started with).
	LogConnections bool
	LogRate        int
}

// Observer learns the outcome of every connect to a backend: the runtime
// feeds passive health marks and handshake RTTs from it. Calls are made on
// the event loops and must not block.
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
	LimitWaits     atomic.Uint64 // times accepting paused at max_conns or the process budget
	ConnLogDropped atomic.Uint64 // connection log lines dropped over the rate limit
	ProxyHeaderStats
	Denied        atomic.Uint64 // clients refused by allow/deny: reset before any backend was chosen
	ClientLimited atomic.Uint64 // clients refused by a per-client limit: reset
	// FirstByteTimeouts counts clients closed for sending nothing within
	// first_byte_timeout (no backend was dialed for them).
	FirstByteTimeouts atomic.Uint64
	// LostWakeups counts blocked directions the stall guard moved on
	// (evstall.go): their destination could take bytes and no wake-up came
	// for two seconds. Expected 0.
	LostWakeups atomic.Uint64
	// StallDegraded counts backends the stall watch marked degraded
	// (stall_timeout: their connections stopped answering).
	StallDegraded atomic.Uint64
	QueueStats
	HoldStats
	RetryStats
	// SNI routing (a VIP with routes): clients whose ClientHello was not
	// TLS or malformed, had no server name or one no route lists, or was
	// not complete within sni_timeout; and those the VIP's own backends
	// took for want of a route.
	SNINotTLS   atomic.Uint64
	SNINoMatch  atomic.Uint64
	SNITimeouts atomic.Uint64
	SNIDefault  atomic.Uint64
	// Startup: the first packets of a postgres VIP with routes
	// (evstartup.go).
	Startup StartupStats
	AppStats
}

// RetryStats count connects begun on another backend after one failed
// (retries; HAProxy's redispatches): the client did not see the failure;
// and of them, those after a backend accepted and then reset or closed
// before sending a byte (retry_on_reset, evretry.go).
type RetryStats struct {
	Retries           atomic.Uint64
	EarlyResetRetries atomic.Uint64
}

// ProxyHeaderStats count the PROXY headers refused
// (accept_proxy_protocol): each connection reset.
type ProxyHeaderStats struct {
	ProxyUntrusted atomic.Uint64 // from a source outside accept_proxy_protocol_from
	ProxyMalformed atomic.Uint64 // malformed, too long, or the client closed before it completed
	ProxyTimeouts  atomic.Uint64 // not complete within connect_timeout
}

// AppStats count the closes asked of connections of an app_protocol VIP
// (evboundary.go): those made at a boundary of the protocol (a WebSocket
// goodbye included), those that fell back to a plain close (no boundary
// in time, framing lost, TLS), and the connections whose framing was
// lost or went TLS.
type AppStats struct {
	BoundaryCloses    atomic.Uint64
	BoundaryFallbacks atomic.Uint64
	FramingLost       atomic.Uint64
}

// StartupStats count a postgres VIP's startup packets: StartupMessages a
// route took by database and user, or none did; SSLRequests and
// GSSENCRequests; CancelRequests; malformed or oversized packets (reset).
// plane.StartupStatus's fields of the same names read them.
type StartupStats struct {
	Routed    atomic.Uint64
	NoMatch   atomic.Uint64
	Encrypted atomic.Uint64
	Cancels   atomic.Uint64
	Malformed atomic.Uint64
}

// QueueStats are the wait queue's counters (evqueue.go): connections
// that waited for a backend slot (every backend at its max_conns or over
// its max_conn_rate), those reset when queue_timeout ran out (or at once,
// with queue_timeout 0), and those that waited (or were reset) while a
// backend was over its max_conn_rate.
type QueueStats struct {
	QueueWaits    atomic.Uint64
	QueueTimeouts atomic.Uint64
	RateWaits     atomic.Uint64
}

// HoldStats are failover_hold's counters (evhold.go): connections held
// now (waiting, or dialing the backend that came), held ever, taken by a
// backend after the hold, reset when the hold ran out, and reset because
// the hold was full.
type HoldStats struct {
	Holding       atomic.Int64
	Held          atomic.Uint64
	HoldReleased  atomic.Uint64
	HoldExpired   atomic.Uint64
	HoldOverflows atomic.Uint64
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
	routes          atomic.Pointer[Routes]             // nil = no SNI routing
	limit           limiter
	clients         *guard.Clients // per-client counts; they outlive reloads
	budget          *ConnBudget    // process-wide; nil = none
	self            *Listeners     // process-wide; nil = none
	ev              *evService     // the listener and connections on the event loops
	wildcard        bool           // listening on 0.0.0.0 or ::: each connection's VIP address is read from its socket
	stop            closer         // closed by Close: ends Serve
	Stats           ServiceStats

	pressure atomic.Int64  // loop clock of the last local-resource failure; 0 = none
	spliced  atomic.Uint64 // bytes written to a destination by splice (tests prove splice ran)

	logs tcpLogs

	queue waitQueue // connections waiting for a backend slot (evqueue.go)

	wg         sync.WaitGroup // connections
	serving    atomic.Bool    // Serve ran: Close waits for it
	acceptDone chan struct{}
}

// tcpLogs are the rate limits of a TCP service's log lines.
type tcpLogs struct {
	warnings rateLog   // per-connection failures
	accept   rateLog   // accept failures (every 5s)
	limit    rateLog   // waits at a connection limit (every 5s)
	lines    lineLimit // the per-connection lines (log_connections)
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
	// Loops run the service's connections (required).
	Loops *Loops
	// Kernel is the process's kernel forwarding; nil = none.
	Kernel *KernelFwd
}

// NewTCPService makes a service that takes the listener over; Serve
// starts it.
func NewTCPService(cfg TCPConfig) (*TCPService, error) {
	if cfg.Loops == nil {
		return nil, errors.New("tcp service: no event loops")
	}
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
		clients:    guard.NewClients(0),
		acceptDone: make(chan struct{}),
	}
	s.logs.lines.lost = &s.Stats.ConnLogDropped
	s.logs.accept.every = 5 * time.Second
	s.logs.limit.every = 5 * time.Second
	s.budget, s.self = cfg.Budget, cfg.Self
	s.wildcard = s.key.Addr.Addr().IsUnspecified()
	ev, err := newEvService(s, cfg.Loops)
	if err != nil {
		return nil, fmt.Errorf("tcp service %s: %w", s.key.Addr, err)
	}
	s.ev = ev
	ev.kernel = cfg.Kernel
	s.queue.token.t = time.AfterFunc(time.Hour, s.tokenDue)
	s.queue.token.t.Stop()
	s.stop.ch = make(chan struct{})
	s.listenKeepAlive = cfg.Settings.KeepAlive
	s.Update(cfg.Settings)
	return s, nil
}

// SetRoutes swaps in the SNI routes new connections use (nil = none);
// connections already routed keep their route.
func (s *TCPService) SetRoutes(r *Routes) { s.routes.Store(r) }

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
	if old != nil {
		s.tryResume() // a higher max_conns frees a paused VIP at once
	}
	s.ev.stall.set(s, st.StallTimeout > 0)
}

// SetDeferAccept sets or clears TCP_DEFER_ACCEPT on the running listener
// (a reload that changes defer_accept): the socket keeps listening, and
// handshakes completing from then on follow the new value. It must not
// race with Close; the runtime only updates VIPs it keeps.
func (s *TCPService) SetDeferAccept(on bool) error {
	if s.ev.closed.Load() {
		return net.ErrClosed
	}
	return setDeferAccept(s.ev.fd, on) // the loops own the listener's socket
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

// Serve puts the listener on the loops and returns once the service is
// closed.
func (s *TCPService) Serve() {
	s.serving.Store(true)
	defer close(s.acceptDone)
	s.serveLoops()
}

// vipFull is called when accepting pauses at max_conns.
func (s *TCPService) vipFull() {
	s.Stats.LimitWaits.Add(1)
	s.logs.limit.warn(s.log, "connection limit reached: max_conns; new clients wait in the listen backlog",
		zap.Stringer("listen", s.key), zap.Int("max_conns", s.settings.Load().MaxConns))
}

// processFull is called when accepting pauses for the process-wide
// connection budget (from the open-file limit).
func (s *TCPService) processFull() {
	s.Stats.LimitWaits.Add(1)
	s.logs.limit.warn(s.log, "connection limit reached: the process-wide budget from the open-file limit; new clients wait in the listen backlog",
		zap.Stringer("listen", s.key), zap.Int("max_connections", s.budget.Cap()))
}

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

// rateLog logs a warning at most once a second from the connection path.
func (s *TCPService) rateLog(msg string, fields ...zap.Field) {
	s.logs.warnings.warn(s.log, msg, append(fields, zap.Stringer("listen", s.key))...)
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

// release ends a flow's live count on b. An unmatched release is a bug
// somewhere: it is logged (and counted on the backend), never hidden.
func (s *TCPService) release(b *l4.Backend) {
	if !b.Release() {
		s.log.Error("live-flow count underflow: a flow was released twice", zap.String("backend", string(b.ID)), zap.Uint64("underflows", b.Underflows()))
	}
	if s.queue.n.Load() > 0 { // one load when nobody waits
		s.ServeQueue()
	}
}

// releaseSlots gives back a connection's max_conns slot and budget slot.
func (s *TCPService) releaseSlots() {
	s.limit.release()
	if s.budget != nil {
		s.budget.release()
	}
}

// selfConnect is the failure of a connect that would loop into l4lb.
func (s *TCPService) selfConnect(b *l4.Backend) error {
	err := fmt.Errorf("%s: %w", b.Addr, errSelfConnect)
	s.rateLog("backend refused: it would loop into l4lb", zap.String("backend", string(b.ID)), zap.Error(err))
	return err
}

// Close stops accepting; established connections continue.
func (s *TCPService) Close() error {
	s.queue.token.t.Stop()
	s.stop.close()
	s.ev.stall.halt()
	s.closeLoops()
	if s.serving.Load() {
		<-s.acceptDone
	}
	s.stopAffinity()
	return nil
}

// Affinity returns the client pin table, or nil when affinity is off.
func (s *TCPService) Affinity() *conntrack.Affinity { return s.affinity.Load() }

// Drain stops accepting and waits for connections to end until ctx is done,
// then resets the rest. It returns how many were reset. On a VIP with an
// app_protocol, connections close at their protocol's next boundary
// meanwhile (SayGoodbye).
func (s *TCPService) Drain(ctx context.Context) int {
	_ = s.Close()
	s.limit.stop()
	s.SayGoodbye(false) // app_protocol VIPs: close at boundaries until the deadline
	return s.drainLoops(ctx)
}

// stopAffinity ends the pin table's sweeper.
func (s *TCPService) stopAffinity() {
	if a := s.affinity.Swap(nil); a != nil {
		_ = a.Close()
	}
}

// ResetWhere resets the connections whose backend matches and returns how
// many it reset; why is the end their log lines give (l4.EndOnDown for
// on_down = reset, l4.EndDisabled for a disabled backend...).
func (s *TCPService) ResetWhere(match func(*l4.Backend) bool, why l4.EndReason) int {
	return s.resetWhereLoops(match, why)
}

// Conns returns the number of proxied connections in progress.
func (s *TCPService) Conns() int { return int(s.ev.live.Load()) }
