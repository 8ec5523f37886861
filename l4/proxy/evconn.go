// A proxied TCP connection on an event loop: non-blocking connect with
// retries, then bytes moved by copy (small chunks) or splice (bulk), with
// half-close, reset propagation and an idle timeout.

package proxy

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/appframe"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// Chunk sizes. A direction moves a chunk by read and write through the
// loop's buffer while chunks are small (request/response traffic: two
// splices through a pipe cost more than a recv and a send), and switches
// to splice once a read brings spliceMin or more (bulk), back again when a
// splice moves less (HAProxy's splice-auto works the same way). The
// crossover, measured by BenchmarkChunk: equal cost at 8 KiB a chunk,
// splice 7-15% cheaper at 16-64 KiB and 25% at 256 KiB, copy 3-20%
// cheaper below 8 KiB.
const (
	copyChunk = 64 << 10
	spliceMin = 16 << 10
	// spliceRounds bounds the chunks a direction moves in one turn, so
	// that one busy connection cannot hold its loop; a connection with
	// more to move takes another turn after the loop's other events.
	spliceRounds = 8
)

// Connection states.
const (
	evConnecting uint8 = iota
	evOpen
	evClosed
	evClosing // closed on purpose, gracefully (evclose.go)
	evHanding // frozen for an upgrade's handover (handoff.go): no event, timer or again turn moves its bytes (they want evOpen); only the handover flushes

	// evFreed: back with its loop, poisoned (builds with the l4lbpoison
	// tag, poison_on.go); other builds leave a freed struct evClosed.
	evFreed uint8 = 0xff
)

// sockEvents is what both of a connection's sockets are registered for,
// once, edge-triggered: readiness is remembered in sock and consumed by
// reads and writes, so that the interest set never changes (no
// epoll_ctl after the registration) and a hang-up cannot wake the loop
// twice.
const sockEvents = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET

// sock is one of a connection's sockets and its remembered readiness.
type sock struct {
	reg
	readable bool // data or a FIN may wait: read until a short read or EAGAIN
	writable bool // the send buffer had room at the last try
	rdhup    bool // the peer's FIN arrived: a short read means EOF is next
}

// evConn is one client connection proxied to one backend, owned by the
// loop that accepted it; its struct goes back to the loop's free list
// when it ends. Its fields are grouped by concern, the ones every event
// and chunk reads first (640 bytes: Go's 640-byte size class). Three
// fields concern the backend: backendSock is the socket to it, chosen
// the backend it connects or is connected to, pick.lastTried the one
// its log line names (chosen is nil after a failed connect, lastTried
// keeps it so that the line says which failed).
type evConn struct {
	state  uint8
	stage  preStage // the pre-read stage it waits in while state is evPreRead (evpreread.go)
	queued bool     // on the loop's again list
	gen    uint32   // this connection's timers carry it; a reused struct gets a new one
	svc    *TCPService
	st     *Settings
	flow   l4.Flow

	// The connection's two sockets (the client's was accepted, the
	// backend's is connected by the loop) and their epoll handlers.
	clientSock, backendSock sock
	cEnd, bEnd              evEnd
	up, down                evDir // client to backend, backend to client

	// chosen is the backend it connects or is connected to, whose live
	// flow it holds (released when the connection ends, or as a close
	// begins); nil after a failed connect until the next pick.
	chosen *l4.Backend
	pick   connPick
	times  connTimes
	in     connSets

	fin    l4.EndReason // whose FIN came first: the end of a connection closed both ways (its log line)
	stays  bool         // an upgrade's new process did not take it: it ends here
	kernel bool         // forwarded in the kernel: its state is its loop's kern entry (evkernel.go)
	app    *appConn     // app_protocol VIPs: the server stream's tracker, a close asked (evboundary.go); nil = none
	freed  *freeRecord  // where it was freed (l4lbpoison builds only)
}

// connPick is how a connection chooses its backend: what it picks from
// and what it tried.
type connPick struct {
	snap *snapshot.Snapshot  // the backends it picks from: the VIP's, or its SNI route's
	aff  *conntrack.Affinity // client pins; nil = none (or a route chose: pins are the VIP's)
	// routes: the VIP's SNI routes when the connection was accepted (nil
	// = none); rt: the route its ClientHello chose (nil = the VIP's own
	// backends).
	routes    *Routes
	rt        *Route
	tried     balance.Tried
	lastTried *l4.Backend // the backend tried last, for the log line (chosen is nil once its connect failed)
	// attempts counts its connects (1 + retries at most); lastFail says
	// how the last one failed: connect_failed or connect_timeout. One
	// word for the two.
	attempts int32
	lastFail l4.EndReason
	// early counts its retries after an early reset (evretry.go);
	// replaying: the loop keeps a copy of the client's bytes for one.
	early     uint8
	replaying bool
}

// connTimes are a connection's times on the loop clock (nanoseconds) and
// the durations its timers wait.
type connTimes struct {
	acceptAt   int64         // at accept (an upgrade passes it on)
	dialAt     int64         // at the last connect()
	connectAt  int64         // when the backend answered; 0 = never
	idle       int64         // idle_timeout when it opened; 0 = none
	localUntil int64         // retrying a local resource failure until then
	localPause time.Duration // the next local-failure retry's wait
	queueUntil int64         // when its wait for a backend slot runs out
}

// connSets says where a connection is entered, each undone as it ends.
type connSets struct {
	conns   bool // its loop's open connections (trackEv)
	waiting bool // its loop's waiting set: a pre-read stage or a backend slot is due
	queue   bool // the VIP's wait queue, not yet served from it (evqueue.go)
	hold    bool // failover_hold's count: held, not yet connected (evhold.go)
	clients bool // the VIP's per-client limits: released when it ends
}

// evEnd is the handler of one of a connection's two sockets.
type evEnd struct {
	c       *evConn
	backend bool
}

func (e *evEnd) onEvent(l *loop, events uint32) { e.c.onEvent(l, e.backend, events) }

// evDir is one direction of an open connection.
type evDir struct {
	src, dst *sock
	pipe     *pipe  // holds pending bytes (or is lent for the splice in flight)
	held     []byte // pending bytes when no pipe could be had
	pending  int    // bytes read from src not yet written to dst
	eof      bool   // src sent FIN
	done     bool   // the FIN was passed on
	splice   bool   // bulk: move chunks with splice
	track    bool   // copy only: the connection's tracker follows these bytes (evboundary.go)
	// stallMark is n when the loop last found the direction blocked on its
	// destination; suspect: the destination could take bytes then, and no
	// edge had come (evstall.go). suspect sits with the other flags: one
	// word for the four.
	suspect   bool
	stallMark uint64
	bytes     *atomic.Uint64 // the backend's count this way (Stats.BytesIn or BytesOut)
	n         uint64         // bytes moved this way (the log line's bytes_in or bytes_out; an upgrade passes them on)
	// at is the loop clock when a byte last moved this way: the later of
	// the two is the idle timer's base, and a request waits while up's is
	// after down's (stallwatch.go).
	at int64
}

// timer kinds in the low two bits of the generation a timer carries.
const (
	timerIdle      = 0
	timerConnect   = 1
	timerKeepAlive = 2
	timerLinger    = 3 // a closing connection's peers had their time (evclose.go)
)

// keepAliveAfter is how long a connection runs before its backend socket
// gets its keepalive options. Four setsockopt calls are a fifth of the
// syscalls of a short connection, and keepalive only matters to one that
// sits idle for longer than its idle time (60s by default); the client
// side inherits them from the listener for free.
const keepAliveAfter = time.Second

// startConn begins proxying a freshly accepted client socket.
func (s *TCPService) startConn(l *loop, fd int, src netip.AddrPort) {
	c := l.newConn()
	*c = evConn{svc: s, st: s.settings.Load(), gen: c.gen,
		pick: connPick{snap: s.snaps.Load(), aff: s.affinity.Load(), routes: s.routes.Load()}}
	c.backendSock.reg = reg{fd: -1, slot: -1}
	c.cEnd, c.bEnd = evEnd{c: c}, evEnd{c: c, backend: true}
	c.flow = l4.Flow{Src: src, Dst: s.key.Addr, Proto: l4.TCP}
	c.times.acceptAt = l.now()
	if s.wildcard {
		c.flow.Dst = localAddrOf(fd, s.key.Addr.Port())
	}
	if c.st.KeepAlive != s.listenKeepAlive {
		setKeepAliveFD(fd, c.st.KeepAlive, true) // changed by a reload since the listener opened
	}
	s.Stats.Active.Add(1)
	l.shared.live.Add(1)
	r, err := l.add(fd, sockEvents, &c.cEnd)
	if err != nil {
		unix.Close(fd)
		c.clientSock.reg = reg{fd: -1, slot: -1}
		c.localFailure(l, err)
		return
	}
	c.clientSock.reg = r
	c.preRead(l, preHeader)
}

// admit applies the VIP's access list and per-client limits to the client
// (the PROXY header's address when one was due), before the pre-read
// stages that follow the header and before any backend. A refused client
// is reset (false).
func (c *evConn) admit(l *loop) bool {
	c.mustLive()
	s, addr := c.svc, c.flow.Src.Addr()
	if !c.st.Access.Allowed(addr) {
		s.Stats.Denied.Add(1)
		c.resetClient(l, l4.EndDenied)
		return false
	}
	switch v := s.clients.Admit(addr, c.st.ClientLimits, l.now()); {
	case v.Refused():
		s.Stats.ClientLimited.Add(1)
		if s.logs.limit.allow() {
			s.log.Warn("per-client limit reached: connection reset", zap.String("vip", c.st.Name),
				zap.Stringer("client", addr), zap.Stringer("limit", v))
		}
		c.resetClient(l, l4.EndClientLimit)
		return false
	case v == guard.Admitted:
		c.in.clients = true
	}
	return true
}

// dial picks the next backend and starts a non-blocking connect.
func (c *evConn) dial(l *loop) {
	c.mustLive()
	l.unwait(c)
	if c.pick.attempts == 0 && c.svc.queue.n.Load() > 0 && c.svc.queue.has(c.store()) {
		// Others wait for a slot or a backend already: arrival order.
		if c.holds() {
			c.holdFailover(l, 0)
			return
		}
		if c.st.QueueTimeout > 0 {
			c.enqueue(l)
			return
		}
	}
	b := c.pickBackend()
	if b == nil {
		if int(c.pick.attempts) <= c.st.Retries && c.pick.snap.Full(&c.pick.tried) {
			c.enqueue(l) // every backend left is at its max_conns or rate: wait for one
			return
		}
		if c.holds() {
			var failedOn uint64
			if c.pick.attempts > 0 {
				failedOn = c.pick.snap.Generation() // every backend it tried failed: wait for news
			}
			c.holdFailover(l, failedOn)
			return
		}
		c.noBackend(l, balance.ErrNoBackend, c.noBackendWhy())
		return
	}
	c.start(l, b)
}

// start connects to b, which the pick acquired.
func (c *evConn) start(l *loop, b *l4.Backend) {
	c.mustLive()
	if c.pick.attempts > 0 {
		c.svc.Stats.Retries.Add(1) // another backend, after a failed connect
	}
	c.pick.tried.Add(b)
	c.chosen, c.pick.lastTried = b, b
	c.pick.attempts++
	c.connectTo(l, b)
}

// pickBackend returns the client's pinned backend on a first attempt when
// it is still eligible, else the balancer's choice; with a live flow
// acquired either way.
func (c *evConn) pickBackend() *l4.Backend {
	c.mustLive()
	if int(c.pick.attempts) > c.st.Retries {
		return nil
	}
	if c.pick.aff != nil && c.pick.tried.Len() == 0 {
		if b, ok := c.pick.aff.Get(c.svc.key, c.flow.Src.Addr()); ok && b.Eligible() && b.TryAcquire() {
			return b // a pinned backend at its cap leaves the choice to the balancer
		}
	}
	return c.pick.snap.Pick(&c.flow, &c.pick.tried)
}

// connectTo opens the backend socket and connects without blocking.
func (c *evConn) connectTo(l *loop, b *l4.Backend) {
	c.mustLive()
	s := c.svc
	if s.self.wouldLoop(l4.TCP, b.Addr) {
		c.connectFailed(l, s.selfConnect(b))
		return
	}
	fd, err := newBackendSocket(b.Addr)
	if err == nil {
		err = connectNB(fd, b.Addr)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		if localFailure(err) {
			c.localFailure(l, err)
			return
		}
		c.connectFailed(l, err)
		return
	}
	r, err := l.add(fd, sockEvents, &c.bEnd)
	if err != nil {
		unix.Close(fd)
		c.localFailure(l, err)
		return
	}
	c.backendSock = sock{reg: r}
	c.times.dialAt = l.now()
	l.after(c.st.ConnectTimeout, c, c.gen<<2|timerConnect)
}

// localFailure retries the same backend while this host is short of
// descriptors, memory or ports, until connect_timeout; meanwhile accepting
// pauses, so clients wait in the listen backlog instead of being reset.
func (c *evConn) localFailure(l *loop, err error) {
	c.mustLive()
	s := c.svc
	s.Stats.LocalErrors.Add(1)
	s.notePressure(l)
	s.rateLog("cannot open a backend connection: local resources exhausted; accepting paused", zap.Error(err))
	now := l.now()
	if c.times.localUntil == 0 {
		c.times.localUntil, c.times.localPause = now+int64(c.st.ConnectTimeout), 10*time.Millisecond
	}
	if c.clientSock.fd < 0 || now+int64(c.times.localPause) > c.times.localUntil {
		if c.chosen != nil {
			s.release(c.chosen)
			c.chosen = nil
		}
		c.noBackend(l, err, l4.EndLocalError) // every other backend would fail the same way
		return
	}
	c.state = evConnecting
	l.after(c.times.localPause, c, c.gen<<2|timerConnect)
	c.times.localPause = min(2*c.times.localPause, 200*time.Millisecond)
}

// onTimer: a connect that took too long, a local-failure retry, the
// backend's keepalive, or the idle check.
func (c *evConn) onTimer(l *loop, gen uint32) {
	if !c.pending(gen) {
		return
	}
	c.mustLive()
	switch gen & 3 {
	case timerKeepAlive:
		if c.kernel {
			c.kernTimer(l)
			return
		}
		if c.state == evOpen && c.backendSock.fd >= 0 {
			setKeepAliveFD(c.backendSock.fd, c.st.KeepAlive, false)
		}
	case timerIdle:
		c.idleCheck(l)
	case timerConnect:
		c.connectTimer(l)
	case timerLinger:
		if c.state == evOpen {
			c.appTimer(l) // a close asked, waiting for a boundary
			return
		}
		c.lingerEnd(l)
	}
}

// pending reports whether a timer armed with gen is still c's: the
// connection has not ended (or been reused) since.
func (c *evConn) pending(gen uint32) bool { return gen>>2 == c.gen && !c.ended() }

// ended reports whether c's connection is over: closed, or its struct
// freed. After a call that may have ended c, its state (read through
// ended, or compared with a live state) is all a caller may look at: a
// freed struct is reused only for a new connection, which only a
// listener's event or a loop task starts, never a callback of another
// connection, so the state read is c's own. Anything else of c is gone
// (l4lbpoison builds panic on it, poison_on.go).
func (c *evConn) ended() bool { return c.state == evClosed || c.state == evFreed }

// connectTimer: a connect that took too long, or a local-failure retry.
func (c *evConn) connectTimer(l *loop) {
	c.mustLive()
	if c.state == evPreRead {
		c.preExpired(l)
		return
	}
	if c.state == evQueued {
		c.queueTimer(l)
		return
	}
	if c.state != evConnecting {
		return
	}
	if c.backendSock.fd < 0 { // a local-failure retry
		c.connectTo(l, c.chosen)
		return
	}
	if l.now()-c.times.dialAt >= int64(c.st.ConnectTimeout) {
		c.connectFailed(l, errConnectTimeout)
	}
}

var errConnectTimeout = errors.New("connect timeout")

// errClosedDuringConnect: the backend hung up before the connect finished.
var errClosedDuringConnect = errors.New("connection closed while connecting")

// connectFailed counts a failed connect and tries the next backend.
func (c *evConn) connectFailed(l *loop, err error) {
	c.mustLive()
	s, b := c.svc, c.chosen
	if c.backendSock.fd >= 0 {
		l.forget(&c.backendSock.reg)
		unix.Close(c.backendSock.fd)
		c.backendSock = sock{reg: reg{fd: -1, slot: -1}}
	}
	if !localFailure(err) {
		b.Stats.ConnectFails.Add(1)
		s.Stats.ConnectFails.Add(1)
		if o := c.observer(); o != nil {
			o.ConnectFailed(b, err)
		}
	}
	s.release(b)
	c.chosen = nil
	c.pick.lastFail = l4.EndConnectFailed
	if err == errConnectTimeout {
		c.pick.lastFail = l4.EndConnectTimeout
	}
	c.times.localUntil = 0
	c.gen = l.nextGen() // the old attempt's timer must not fire on the next
	c.dial(l)
}

// noBackend resets the client: nothing could be reached (why says how).
func (c *evConn) noBackend(l *loop, err error, why l4.EndReason) {
	c.mustLive()
	s := c.svc
	s.Stats.NoBackend.Add(1)
	s.rateLog("no usable backend for VIP: client reset", zap.Stringer("client", c.flow.Src), zap.Error(err))
	c.resetClient(l, why)
}

// resetClient ends a connection that has no backend socket with a reset
// to the client.
func (c *evConn) resetClient(l *loop, why l4.EndReason) {
	c.mustLive()
	s := c.svc
	if c.clientSock.fd >= 0 {
		_ = unix.SetsockoptLinger(c.clientSock.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
		l.forget(&c.clientSock.reg)
		unix.Close(c.clientSock.fd)
	}
	c.endReplay(l)
	if c.up.pipe != nil { // bytes an early-reset retry kept for a backend it did not find
		l.pipes.pool.discard(c.up.pipe)
		c.up.pipe = nil
	}
	c.state = evClosed
	s.logConn(l, c, why)
	l.shared.live.Add(-1)
	s.evConnDone(l, c)
	l.freeConn(c)
}

// connected finishes a connect: the backend answered (events is what
// epoll reported; writable without an error means success, and costs no
// getsockopt).
func (c *evConn) connected(l *loop, events uint32) {
	c.mustLive()
	s, b := c.svc, c.chosen
	var err error
	if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		soerr, gerr := unix.GetsockoptInt(c.backendSock.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case gerr != nil:
			err = gerr
		case soerr != 0:
			err = unix.Errno(soerr)
		default:
			err = errClosedDuringConnect
		}
	}
	if err == nil && s.self.covers(l4.TCP, b.Addr) && s.self.loops(l4.TCP, localAddrOf(c.backendSock.fd, 0), b.Addr) {
		_ = unix.SetsockoptLinger(c.backendSock.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
		err = s.selfConnect(b)
	}
	if err != nil {
		c.connectFailed(l, err)
		return
	}
	b.Stats.Flows.Add(1)
	c.times.connectAt = l.now()
	c.unhold(true)
	if c.pick.aff != nil {
		_ = c.pick.aff.Set(s.key, c.flow.Src.Addr(), b)
	}
	if o := c.observer(); o != nil {
		var rtt time.Duration
		if c.st.MeasureConnect {
			rtt = tcpInfoRTT(c.backendSock.fd, time.Duration(l.now()-c.times.dialAt))
		}
		o.ConnectOK(b, rtt)
	}
	if err := c.sendProxyHeader(l); err != nil {
		c.connectFailed(l, err)
		return
	}
	c.open(l)
}

// open starts moving bytes both ways.
func (c *evConn) open(l *loop) {
	c.mustLive()
	s := c.svc
	c.state = evOpen
	carry := c.up // client bytes an early-reset retry kept (evretry.go)
	c.up = evDir{src: &c.clientSock, dst: &c.backendSock, bytes: &c.chosen.Stats.BytesIn, pipe: carry.pipe, held: carry.held, pending: carry.pending}
	c.down = evDir{src: &c.backendSock, dst: &c.clientSock, bytes: &c.chosen.Stats.BytesOut}
	if c.pick.replaying {
		c.resend(l)
	}
	c.startReplay(l)
	if !s.trackEv(l, c) {
		c.finish(l, true, true, l4.EndDrain) // the service is shutting down
		return
	}
	if c.st.AppProtocol == l4.AppMySQL {
		c.up.at = c.times.connectAt // the server speaks first: its greeting is due (stallwatch.go)
	}
	if c.st.IdleTimeout > 0 {
		c.times.idle = int64(c.st.IdleTimeout)
		l.after(c.st.IdleTimeout, c, c.gen<<2|timerIdle)
	}
	if c.st.KeepAlive > 0 {
		l.after(keepAliveAfter, c, c.gen<<2|timerKeepAlive)
	}
	if c.st.AppProtocol != l4.AppNone {
		c.startApp(l)
	}
	c.pump(l) // the client may have sent already, a server-speaks-first backend too
}

// onEvent notes the readiness of the client (backend = false) or backend
// socket and moves what it allows.
func (c *evConn) onEvent(l *loop, backend bool, events uint32) {
	c.mustLive()
	if l.hooks.events != nil {
		events = l.hooks.events(c, backend, events)
	}
	sk := &c.clientSock
	if backend {
		sk = &c.backendSock
	}
	if events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		sk.readable = true
	}
	if events&unix.EPOLLRDHUP != 0 {
		sk.rdhup = true
	}
	if events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		sk.writable = true
	}
	switch c.state {
	case evConnecting:
		if backend {
			if events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
				c.connected(l, events)
			}
		} else if events&unix.EPOLLERR != 0 {
			c.finish(l, false, true, l4.EndClientReset) // the client reset before its backend answered
		}
	case evPreRead:
		if backend {
			return
		}
		if events&unix.EPOLLERR != 0 {
			c.finish(l, false, false, l4.EndClientReset)
			return
		}
		c.peekPre(l)
	case evQueued:
		if !backend && events&unix.EPOLLERR != 0 {
			c.finish(l, false, false, l4.EndClientReset) // gave up waiting; bytes and a FIN wait for the backend
		}
	case evOpen, evClosing:
		if c.kernel {
			c.kernEvent(l, sk, events)
			return
		}
		if events&unix.EPOLLERR != 0 {
			c.failed(l, &sk.reg) // a reset: the other side learns by one too
			return
		}
		c.pump(l)
	}
}

// pump moves what the sockets' readiness allows, both ways. A connection
// that used its turn with more to move goes on the loop's again list.
func (c *evConn) pump(l *loop) {
	c.mustLive()
	if c.kernel {
		c.kernFlush(l)
		return
	}
	if c.state == evClosing {
		c.pumpClosing(l)
		return
	}
	more := c.move(l, &c.up)
	if c.state == evOpen && c.move(l, &c.down) {
		more = true
	}
	if c.app != nil && c.app.asked && c.state == evOpen {
		c.appCheck(l)
	}
	if more && c.state == evOpen && !c.queued {
		c.queued = true
		l.again = append(l.again, againEntry{t: c, gen: c.gen})
	}
	if !more && c.state == evOpen && c.st.KernelForward && c.kernelReady() {
		c.toKernel(l)
	}
}

func (c *evConn) again(l *loop, gen uint32) {
	if gen == c.gen && (c.state == evOpen || c.state == evClosing) {
		c.queued = false
		c.pump(l)
	}
}

// move moves d's bytes until its source is drained, its destination is
// full or the turn is used up (then it returns true).
func (c *evConn) move(l *loop, d *evDir) bool {
	c.mustLive()
	for range spliceRounds {
		if d.pending > 0 {
			if !d.dst.writable || !c.flush(l, d) {
				return false
			}
		}
		if d.eof || !d.src.readable {
			return false
		}
		var n int
		var err error
		var dstErr bool
		if d.splice {
			n, err, dstErr = c.spliceChunk(l, d)
		} else {
			n, err, dstErr = c.copyChunk(l, d)
		}
		switch {
		case err == unix.EAGAIN:
			d.src.readable = false
			return false
		case err != nil && dstErr:
			c.dstFailed(l, d, err)
			return false
		case err != nil:
			c.srcFailed(l, d, err)
			return false
		case n == 0:
			c.eof(l, d)
			return false
		}
		if c.pick.replaying && d == &c.down {
			c.endReplay(l) // the backend answered: no retry from now on
		}
		if d.splice {
			if n < spliceMin {
				d.splice = false // a trickle: copy from now on
			}
			continue // a short splice may be the pipe's limit, not the source's: read again
		}
		if n >= spliceMin && !d.track && !(c.pick.replaying && d == &c.up) {
			d.splice = true // bulk: splice wins from about 16 KiB a chunk (BenchmarkChunk)
		}
		if n < copyChunk {
			// The socket held less than asked: drained. New bytes bring a
			// new edge; after the peer's FIN, EOF is all that is left.
			if d.src.rdhup {
				if d.pending == 0 {
					c.eof(l, d)
				} else {
					c.sawFIN(d)
					d.eof = true // passed on once the pending bytes are
				}
				return false
			}
			d.src.readable = false
			return false
		}
	}
	return true
}

// copyChunk reads a chunk into the loop's buffer and writes it on; what
// the destination does not take waits in a pipe.
func (c *evConn) copyChunk(l *loop, d *evDir) (n int, err error, dstErr bool) {
	c.mustLive()
	buf := l.scratch.buf
	if d.track {
		buf = buf[:len(buf)-appframe.CloseFrameLen] // room for a goodbye after the bytes read
	}
	n, err = readRetry(d.src.fd, buf)
	if err != nil || n == 0 {
		return n, err, false
	}
	if c.pick.replaying && d == &c.up {
		c.record(l, buf[:n])
	}
	out := n
	if d.track {
		out = c.followServer(l, buf, n)
	}
	w := 0
	if d.dst.writable && out > 0 {
		w, err = writeRetry(d.dst.fd, buf[:out])
		if err == unix.EAGAIN {
			w, err = 0, nil
			d.dst.writable = false
			l.watchStalls()
		}
		if err != nil {
			if d == &c.up && d.n == 0 && out > 0 {
				c.hold(l, d, buf[:out]) // not lost: an early-reset retry sends them on (evretry.go)
			}
			return n, err, true
		}
	}
	c.moved(l, d, w)
	if w < out {
		// What was not written waits; the destination stays writable
		// unless the write said EAGAIN (see writePending), so the next
		// round writes again and learns which it is.
		c.hold(l, d, buf[w:out])
	}
	return n, nil, false
}

// hold keeps bytes the destination did not take: in a pipe, or (when no
// pipe can be had) in a buffer of the connection's own.
func (c *evConn) hold(l *loop, d *evDir, rest []byte) {
	c.mustLive()
	d.pending = len(rest)
	if d.pipe == nil {
		p, err := l.getPipe()
		if err == nil {
			d.pipe = p
		}
	}
	if d.pipe != nil {
		if k, err := writeRetry(d.pipe.w, rest); err == nil && k == len(rest) {
			return
		}
		// The pipe did not take it all (it cannot be sized up): keep the
		// bytes in user space instead.
		l.pipes.pool.discard(d.pipe)
		d.pipe = nil
	}
	c.svc.Stats.PipelessCopies.Add(1)
	d.held = append(d.held[:0], rest...)
}

// spliceChunk splices a chunk into the direction's pipe and on to the
// destination.
func (c *evConn) spliceChunk(l *loop, d *evDir) (n int, err error, dstErr bool) {
	c.mustLive()
	if d.pipe == nil {
		p, perr := l.getPipe()
		if perr != nil {
			c.noPipe(l, perr)
			d.splice = false
			return c.copyChunk(l, d)
		}
		d.pipe = p
	}
	n, err = spliceRetry(d.src.fd, d.pipe.w, l.pipes.pool.size)
	if err != nil || n == 0 {
		c.putPipe(l, d)
		return n, err, false
	}
	w := 0
	if d.dst.writable {
		w, err = spliceRetry(d.pipe.r, d.dst.fd, n)
		if err == unix.EAGAIN {
			w, err = 0, nil
			d.dst.writable = false
			l.watchStalls()
		}
		if err != nil {
			d.pending = n // still in the pipe (an early-reset retry sends them on)
			return n, err, true
		}
	}
	c.moved(l, d, w)
	c.svc.spliced.Add(uint64(w))
	d.pending = n - w
	if d.pending == 0 {
		c.putPipe(l, d) // else the next round writes the rest (see writePending)
	}
	return n, nil, false
}

// noPipe counts a chunk that goes through user space for want of a pipe.
func (c *evConn) noPipe(l *loop, err error) {
	c.mustLive()
	s := c.svc
	s.Stats.PipelessCopies.Add(1)
	if err == errPipeLimit {
		s.rateLog("max_pipes reached: copying in user space", zap.Int("max_pipes", s.pipes.Max()))
		return
	}
	s.Stats.LocalErrors.Add(1)
	s.notePressure(l)
	s.rateLog("cannot open a pipe: local resources exhausted; copying in user space, accepting paused", zap.Error(err))
}

func (c *evConn) putPipe(l *loop, d *evDir) {
	c.mustLive()
	if d.pipe != nil {
		l.putPipe(d.pipe)
		d.pipe = nil
	}
}

// flush writes d's pending bytes on; it returns true once none are left
// (and the connection is still open).
func (c *evConn) flush(l *loop, d *evDir) bool {
	c.mustLive()
	if !c.writePending(l, d) {
		return false
	}
	if d.eof {
		c.passEOF(l, d)
		return false
	}
	return true
}

// writePending writes d's pending bytes on; it returns true once none
// are left.
//
// It writes until nothing is left or the destination answers EAGAIN:
// under edge-triggered epoll only EAGAIN promises an EPOLLOUT edge later.
// A short write or splice is not a full socket: splice(2) from a pipe to a
// socket returns what it moved so far as soon as a signal is pending
// (splice_to_socket checks between the socket writes it makes of a pipe's
// pages), and the Go runtime signals a loop's thread to preempt it. Taken
// for a full socket, such a return waited for an edge the kernel never
// sends, as the socket had room (TestShortSpliceUnderSignals; the
// once-a-second retry of evstall.go papered over it until then).
func (c *evConn) writePending(l *loop, d *evDir) bool {
	c.mustLive()
	for d.pending > 0 {
		var w int
		var err error
		if d.pipe != nil {
			w, err = spliceRetry(d.pipe.r, d.dst.fd, d.pending)
			c.svc.spliced.Add(uint64(w))
		} else {
			w, err = writeRetry(d.dst.fd, d.held[len(d.held)-d.pending:])
		}
		switch {
		case err == unix.EAGAIN:
			d.dst.writable = false
			l.watchStalls()
			return false
		case err == nil && w == 0:
			err = errNoProgress // never seen; looping on it would hold the loop
			fallthrough
		case err != nil:
			c.dstFailed(l, d, err)
			return false
		}
		c.moved(l, d, w)
		d.pending -= w
	}
	c.putPipe(l, d)
	d.held = d.held[:0]
	return true
}

// errNoProgress: a write of pending bytes moved nothing and said nothing.
var errNoProgress = errors.New("write moved no byte")

// moved counts bytes moved and notes activity.
func (c *evConn) moved(l *loop, d *evDir, n int) {
	c.mustLive()
	if n > 0 {
		d.bytes.Add(uint64(n))
		d.n += uint64(n)
		d.at = l.now()
	}
}

// eof: d's source sent FIN.
func (c *evConn) eof(l *loop, d *evDir) {
	c.mustLive()
	if d == &c.down && c.earlyRetry(l) {
		return
	}
	c.sawFIN(d)
	d.eof = true
	if d.pending == 0 {
		c.passEOF(l, d)
	}
}

// passEOF passes a FIN on, or ends the connection when the other
// direction is done too (closing sends the FIN without a shutdown call).
func (c *evConn) passEOF(l *loop, d *evDir) {
	c.mustLive()
	d.done = true
	other := &c.up
	if d == &c.up {
		other = &c.down
	}
	if other.done {
		c.finish(l, false, false, c.fin)
		return
	}
	if err := shutdownWrite(d.dst.fd); err != nil {
		c.dstFailed(l, d, err)
	}
}

// sawFIN notes d's FIN: the first of the two names the end of a
// connection that closes both ways.
func (c *evConn) sawFIN(d *evDir) {
	c.mustLive()
	if c.fin != l4.EndNone {
		return
	}
	c.fin = l4.EndBackendFIN
	if d == &c.up {
		c.fin = l4.EndClientFIN
	}
}

// srcFailed: d's source failed (reset); its peer learns by a reset.
func (c *evConn) srcFailed(l *loop, d *evDir, err error) {
	c.mustLive()
	if d.src == &c.backendSock && c.earlyRetry(l) {
		return
	}
	c.finish(l, d.src == &c.backendSock, d.src == &c.clientSock, c.resetOf(d.src == &c.clientSock))
}

// dstFailed: d's destination failed; whoever sent to it learns by a reset.
func (c *evConn) dstFailed(l *loop, d *evDir, err error) {
	c.mustLive()
	if d.dst == &c.backendSock && c.earlyRetry(l) {
		return
	}
	c.finish(l, d.src == &c.clientSock, d.src == &c.backendSock, c.resetOf(d.dst == &c.clientSock))
}

// failed: a socket reported an error outside any read or write.
func (c *evConn) failed(l *loop, r *reg) {
	c.mustLive()
	if r == &c.backendSock.reg && c.earlyRetry(l) {
		return
	}
	c.finish(l, r == &c.backendSock.reg, r == &c.clientSock.reg, c.resetOf(r == &c.clientSock.reg))
}

// resetOf is the end of a connection whose client's (or backend's) side failed.
func (c *evConn) resetOf(client bool) l4.EndReason {
	c.mustLive()
	if client {
		return l4.EndClientReset
	}
	return l4.EndBackendReset
}

// idleCheck ends a connection that moved no byte for the idle timeout.
func (c *evConn) idleCheck(l *loop) {
	c.mustLive()
	if c.state != evOpen {
		return
	}
	if c.kernel {
		c.kernSync(l)
	}
	quiet := l.now() - c.lastActive()
	if quiet < c.times.idle {
		l.after(time.Duration(c.times.idle-quiet), c, c.gen<<2|timerIdle)
		return
	}
	c.svc.Stats.IdleClosed.Add(1)
	c.finish(l, false, false, l4.EndIdleTimeout)
}

// lastActive is when a byte last moved either way, or the connect
// finished (loop clock).
func (c *evConn) lastActive() int64 {
	c.mustLive()
	return max(c.up.at, c.down.at, c.times.connectAt)
}

// finish closes both sockets (a reset where asked, else a FIN), does the
// connection's accounting and logs its end, why.
func (c *evConn) finish(l *loop, resetClient, resetBackend bool, why l4.EndReason) {
	c.mustLive()
	if c.state == evClosed {
		return
	}
	released := c.state == evClosing // its live flow ended when the close began
	if c.app != nil && c.app.asked {
		released = c.app.released
		why = c.app.ask.why // whatever ends it, a close was asked
	} else if released {
		why = l4.EndRebalance // whatever ends it, a rebalance began to close it
	}
	l.putApp(c)
	if c.kernel {
		c.kernEnd(l)
	}
	c.endReplay(l)
	c.state = evClosed
	c.closeSock(l, &c.clientSock, resetClient)
	c.closeSock(l, &c.backendSock, resetBackend)
	for _, d := range [2]*evDir{&c.up, &c.down} {
		if d.pipe != nil {
			l.pipes.pool.discard(d.pipe) // it may hold bytes nobody will read
			d.pipe = nil
		}
	}
	s := c.svc
	if c.chosen != nil && !released {
		s.release(c.chosen)
	}
	if c.in.conns {
		s.untrackEv(l, c)
	}
	s.logConn(l, c, why)
	l.shared.live.Add(-1)
	s.evConnDone(l, c)
	l.freeConn(c)
}

// closeSock closes one socket of the connection, with a reset if asked.
func (c *evConn) closeSock(l *loop, sk *sock, reset bool) {
	c.mustLive()
	if sk.fd < 0 {
		return
	}
	if reset {
		_ = unix.SetsockoptLinger(sk.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
	}
	l.forget(&sk.reg)
	closeFD(sk.fd)
	sk.fd = -1
}

// sendProxyHeader writes the PROXY header before any client byte. The
// socket was just connected, so its send buffer takes the whole header.
func (c *evConn) sendProxyHeader(l *loop) error {
	c.mustLive()
	if c.st.ProxyProtocol == l4.ProxyOff {
		return nil
	}
	h := appendProxyHeader(l.scratch.hdr[:0], c.st.ProxyProtocol, &c.flow)
	n, err := writeRetry(c.backendSock.fd, h)
	if err == nil && n < len(h) {
		err = errors.New("proxy header: short write")
	}
	return err
}

// newBackendSocket opens a non-blocking TCP socket for addr, without
// Nagle's delay (keepalive comes later, see keepAliveAfter).
func newBackendSocket(addr netip.AddrPort) (int, error) {
	family := unix.AF_INET
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		family = unix.AF_INET6
	}
	fd, err := socketNB(family, unix.SOCK_STREAM, unix.IPPROTO_TCP)
	if err != nil {
		return -1, err
	}
	_ = setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	return fd, nil
}

// setKeepAliveFD sets TCP keepalive on a socket (idle 0 = off; wasOn:
// the socket may have it on, else off needs no call).
func setKeepAliveFD(fd int, idle time.Duration, wasOn bool) {
	if idle <= 0 {
		if wasOn {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0)
		}
		return
	}
	ka := keepAliveConfig(idle)
	_ = setsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	_ = setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(ka.Idle/time.Second))
	_ = setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(ka.Interval/time.Second))
	_ = setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, ka.Count)
}

// tcpInfoRTT is the kernel's RTT estimate right after connect (SYN to
// SYN-ACK), or wall when TCP_INFO has none.
func tcpInfoRTT(fd int, wall time.Duration) time.Duration {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil || info.Rtt == 0 {
		return wall
	}
	return time.Duration(info.Rtt) * time.Microsecond
}

// localAddrOf is a socket's local address (port 0 keeps the one the
// kernel reports; another port replaces it).
func localAddrOf(fd int, port uint16) netip.AddrPort {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}
	}
	ap := sockaddrAddrPort(sa)
	if port != 0 {
		ap = netip.AddrPortFrom(ap.Addr(), port)
	}
	return ap
}

// sockaddrAddrPort converts a socket address (IPv4-mapped IPv6 becomes IPv4).
func sockaddrAddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}
