// UDP on event loops: each loop reads its own socket of the VIP (a
// SO_REUSEPORT group, so the kernel keeps every flow on one loop) in
// recvmmsg batches, owns the sessions it created, reads their backends'
// replies and sends them back in sendmmsg batches gathered over the
// sessions it served in one round.

package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
)

// Batches on the loops: a VIP socket reads up to vipBatch datagrams per
// recvmmsg and takes up to vipRounds batches per turn; up to replyOut
// replies wait for one sendmmsg; a session reads up to replyBatch replies
// per recvmmsg.
const (
	vipRounds = 4
	replyOut  = 32
)

// udpEvents is what the VIP and session sockets are registered for:
// readable, edge-triggered (a loop never waits to write a datagram: a full
// socket buffer drops it, as a router would).
const udpEvents = unix.EPOLLIN | unix.EPOLLET

// evUDP is the event-loop side of a UDPService.
type evUDP struct {
	loops *Loops
	socks []*udpSock // by loop id
	stop  chan struct{}
	once  sync.Once
	// paused: the loops do not read the VIP sockets (another process does,
	// or will once this one has its sessions: an upgrade).
	paused atomic.Bool

	// mu keeps QueueDrops off the sockets' descriptors once closeLoops
	// closes them; closedDrops is their count at that moment.
	mu          sync.Mutex
	fdsClosed   bool
	closedDrops uint64
}

// udpSock is the VIP socket a loop reads, and the replies it will send.
type udpSock struct {
	s        *UDPService
	fd       int
	reg      reg
	in       *msgBatch // client datagrams
	out      *msgBatch // replies gathered this round
	nout     int
	readable bool
	queued   bool // on the loop's again list
	flushing bool // on the loop's flush list
	closed   bool
}

// loopSession is a UDP session owned by one loop: its connected socket to
// the backend is in that loop's epoll set.
type loopSession struct {
	s        *UDPService
	owner    *loop
	key      conntrack.Key
	client   netip.AddrPort
	replySrc netip.Addr // source address for replies when the VIP is a wildcard
	backend  *l4.Backend
	reg      reg
	gen      uint32
	sent     int
	replied  bool // the backend answered once: Observer.ConnectOK was told
	readable bool
	queued   bool
	open     bool
	// clientHeld: counted by the VIP's per-client limits; released when
	// the session closes.
	clientHeld bool

	// For the session's log line (connlog.go).
	log         bool         // log_connections was on when the session began
	why         l4.EndReason // udp_responses: set by its loop before it deletes the session
	startAt     int64        // loop clock
	datagramsIn uint64
	bytesIn     uint64
	bytesOut    uint64

	freed *freeRecord // where it was freed (l4lbpoison builds only)
}

// endedSession is a session another goroutine ended, and why; gen is the
// session's generation then (a struct closed and reused since is left
// alone).
type endedSession struct {
	sess *loopSession
	gen  uint32
	why  conntrack.Reason
}

// newEvUDP takes the VIP's socket over for the loops (a dup; the
// original closes, so Go's netpoller stops watching it) and opens one
// more socket of its SO_REUSEPORT group per further loop. With group (the
// sockets of an inherited group, in their order) it uses those instead,
// joining more members or closing the extra ones when this process runs
// another number of loops.
func newEvUDP(s *UDPService, loops *Loops, group []int) (*evUDP, error) {
	fds := group
	if len(fds) == 0 {
		first, err := s.takeFD()
		if err != nil {
			return nil, err
		}
		fds = []int{first}
	}
	for _, fd := range group {
		if err := unix.SetNonblock(fd, true); err != nil {
			closeAll(fds)
			return nil, err
		}
	}
	if len(fds) > loops.Len() {
		closeAll(fds[loops.Len():])
		fds = fds[:loops.Len()]
	}
	for i := len(fds); i < loops.Len(); i++ {
		fd, err := joinGroup(fds[0], s.key.Addr)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("udp socket %d of %d for %s: %w", i+1, loops.Len(), s.key.Addr, err)
		}
		fds = append(fds, fd)
	}
	e := &evUDP{loops: loops, stop: make(chan struct{})}
	e.paused.Store(s.startPaused)
	for _, fd := range fds {
		e.socks = append(e.socks, &udpSock{s: s, fd: fd, reg: reg{fd: fd, slot: -1},
			in: newMsgBatch(vipBatch, bufSize), out: newMsgBatch(replyOut, bufSize)})
	}
	return e, nil
}

// takeFD dups the VIP socket's descriptor and closes the original.
func (s *UDPService) takeFD() (int, error) {
	var fd int
	var derr error
	if err := s.raw.Control(func(f uintptr) { fd, derr = unix.Dup(int(f)) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("dup udp socket: %w", derr)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	_ = s.conn.Close()
	return fd, nil
}

// joinGroup opens another socket bound like first (a member of its
// SO_REUSEPORT group), with the same family and options.
func joinGroup(first int, addr netip.AddrPort) (int, error) {
	family := unix.AF_INET
	var sa unix.Sockaddr
	if a := addr.Addr(); a.Is4() || a.Is4In6() {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: a.Unmap().As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: a.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, err
	}
	copyOpt := func(level, opt int) error {
		v, err := unix.GetsockoptInt(first, level, opt)
		if err == nil {
			err = unix.SetsockoptInt(fd, level, opt, v)
		}
		return err
	}
	opts := [][2]int{{unix.SOL_SOCKET, unix.SO_REUSEPORT}}
	if family == unix.AF_INET {
		opts = append(opts, [2]int{unix.IPPROTO_IP, unix.IP_FREEBIND}, [2]int{unix.IPPROTO_IP, unix.IP_PKTINFO})
	} else {
		opts = append(opts, [2]int{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY}, [2]int{unix.IPPROTO_IPV6, unix.IPV6_FREEBIND},
			[2]int{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO})
	}
	for _, o := range opts {
		if err := copyOpt(o[0], o[1]); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("socket option %d/%d: %w", o[0], o[1], err)
		}
	}
	for _, o := range [][2]int{{unix.SO_RCVBUF, unix.SO_RCVBUFFORCE}, {unix.SO_SNDBUF, unix.SO_SNDBUFFORCE}} {
		if err := copyBuffer(first, fd, o[0], o[1]); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("socket buffer %d: %w", o[0], err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind: %w", err)
	}
	return fd, nil
}

// copyBuffer gives fd the buffer size (opt: SO_RCVBUF or SO_SNDBUF) that
// first has. getsockopt reports what the kernel keeps, which is twice
// what setsockopt was given (it doubles the value for its bookkeeping),
// so copying the reported value would double it again: the value set is
// half of it, and nothing is set when the two already agree (both at the
// default). force (SO_RCVBUFFORCE, SO_SNDBUFFORCE) passes the
// net.core.[rw]mem_max clamp that first may have passed; without
// CAP_NET_ADMIN the plain option is used.
func copyBuffer(first, fd, opt, force int) error {
	want, err := unix.GetsockoptInt(first, unix.SOL_SOCKET, opt)
	if err != nil {
		return err
	}
	have, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, opt)
	if err != nil || have == want {
		return err
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, want/2) == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, want/2)
}

// serveLoops puts the VIP's sockets on the loops; it returns once the
// service is closed, as Serve does.
func (s *UDPService) serveLoops() {
	e := s.ev
	e.loops.each(func(l *loop) {
		vs := e.socks[l.id]
		if e.paused.Load() || vs.reg.slot >= 0 {
			return // PauseReading(false) registers it
		}
		r, err := l.add(vs.fd, udpEvents, vs)
		if err != nil {
			s.log.Error("cannot watch the udp socket", zap.Stringer("listen", s.key), zap.Error(err))
			return
		}
		vs.reg = r
	})
	<-e.stop
}

// closeLoops stops reading on every loop, ends every session (each loop
// closes its own) and waits until they are closed.
func (s *UDPService) closeLoops() {
	e := s.ev
	e.once.Do(func() {
		e.mu.Lock()
		e.closedDrops, e.fdsClosed = e.queueDrops(), true
		e.mu.Unlock()
		e.loops.each(func(l *loop) {
			vs := e.socks[l.id]
			vs.closed = true
			l.withdraw(&vs.reg) // another process may hold the socket (an upgrade): leave no interest behind
			unix.Close(vs.fd)
		})
		_ = s.table.Close() // its end hook hands each session to its loop to close
		e.loops.each(func(*loop) {})
		close(e.stop)
	})
}

// QueueDrops returns how many client datagrams the kernel dropped on the
// VIP's sockets, almost all for a full receive queue: the loops did not
// read them fast enough. Read from the sockets (SO_MEMINFO), so it costs
// the data path nothing; it includes drops from before an upgrade passed
// the sockets to this process.
func (s *UDPService) QueueDrops() uint64 {
	e := s.ev
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fdsClosed {
		return e.closedDrops
	}
	return e.queueDrops()
}

// queueDrops sums the VIP sockets' drop counts (e.mu held).
func (e *evUDP) queueDrops() uint64 {
	var n uint64
	for _, vs := range e.socks {
		if d, err := socketDrops(vs.fd); err == nil {
			n += d
		}
	}
	return n
}

// onEvent: the VIP socket is readable.
func (vs *udpSock) onEvent(l *loop, _ uint32) {
	vs.readable = true
	vs.read(l)
}

func (vs *udpSock) again(l *loop, _ uint32) {
	vs.queued = false
	vs.read(l)
}

// read takes batches of client datagrams until the socket is drained or
// the turn is used up.
func (vs *udpSock) read(l *loop) {
	s := vs.s
	for range vipRounds {
		if !vs.readable || vs.closed {
			return
		}
		vs.in.prepRecv(vipBatch, true, s.wildcard)
		n, err := recvmmsg(vs.fd, vs.in.hdrs)
		switch {
		case err == unix.EAGAIN:
			vs.readable = false
			return
		case err == unix.EINTR:
			continue
		case err != nil:
			s.Stats.ReadErrors.Add(1)
			s.rateLog("udp read failed", zap.Error(err))
			continue
		}
		for i := range n {
			s.handleOn(l, vs, i)
		}
		if n < vipBatch {
			vs.readable = false // drained: a new datagram brings a new edge
			return
		}
	}
	if !vs.queued {
		vs.queued = true
		l.again = append(l.again, againEntry{t: vs})
	}
}

// handleOn forwards datagram i of vs's batch.
func (s *UDPService) handleOn(l *loop, vs *udpSock, i int) {
	b := vs.in
	if b.truncated(i) {
		s.Stats.Truncated.Add(1)
		return
	}
	dst := s.key.Addr.Addr()
	if s.wildcard {
		if d, ok := b.destination(i); ok {
			dst = d
		}
	}
	flow := l4.Flow{Src: b.source(i), Dst: netip.AddrPortFrom(dst, s.key.Addr.Port()), Proto: l4.UDP}
	key := conntrack.KeyOf(&flow)
	sess := s.loopSession(key)
	if sess == nil {
		held, ok := s.admitSession(l, flow.Src.Addr())
		if !ok {
			return
		}
		// flow goes by value: its address escapes only on this path, so
		// a datagram of an existing session, or of a refused client,
		// allocates nothing.
		if sess = s.newLoopSession(l, key, flow, held); sess == nil {
			return
		}
	}
	p := b.payload(i)
	if sess.owner != l {
		// The kernel keeps a flow on one socket of the group while the
		// group stands, and the group lives as long as the VIP; a
		// datagram of another loop's session would race with its close.
		// It happens only after an upgrade that changed the number of
		// loops (the group shrank): the session ends (on its loop), so
		// the flow's next datagram starts one here.
		s.table.Delete(key)
		s.Stats.Dropped.Add(1)
		return
	}
	if _, err := writeRetry(sess.reg.fd, p); err != nil {
		s.Stats.Dropped.Add(1)
		return
	}
	s.Stats.Datagrams.Add(1)
	sess.backend.Stats.BytesIn.Add(uint64(len(p)))
	sess.datagramsIn++
	sess.bytesIn += uint64(len(p))
}

// loopSession returns the live session of key, ending it first if its
// backend is no longer eligible (the datagram then starts a new one).
func (s *UDPService) loopSession(key conntrack.Key) *loopSession {
	e, ok := s.table.Lookup(key)
	if !ok {
		return nil
	}
	sess := e.Owner.(*loopSession)
	if !e.Backend.Eligible() {
		s.Stats.Moved.Add(1)
		s.table.Delete(key)
		return nil
	}
	return sess
}

// admitSession applies the VIP's access list, max_sessions and per-client
// limits to a datagram that would start a session for a client at src;
// held says the client's count was taken (give it back if no session
// starts).
func (s *UDPService) admitSession(l *loop, src netip.Addr) (held, ok bool) {
	st := s.settings.Load()
	if !st.Access.Allowed(src) {
		s.Stats.Denied.Add(1)
		return false, false
	}
	if !s.reserveSession(st.MaxSessions) {
		s.Stats.SessionsRefused.Add(1)
		s.rateLog("max_sessions reached: datagram from a new client dropped", zap.Int("max_sessions", st.MaxSessions))
		return false, false
	}
	switch v := s.clients.Admit(src, st.ClientLimits, l.now()); {
	case v.Refused():
		s.sessions.Add(-1) // the reservation
		s.Stats.ClientLimited.Add(1)
		if s.warnings.allow() { // fields built only for the line written: a flood allocates nothing
			s.log.Warn("per-client limit reached: datagram from a new session dropped", zap.Stringer("listen", s.key),
				zap.Stringer("client", src), zap.Stringer("limit", v))
		}
		return false, false
	case v == guard.Admitted:
		return true, true
	}
	return false, true
}

// newLoopSession opens a session for a new client on loop l (admitted by
// admitSession; held: its per-client count was taken).
func (s *UDPService) newLoopSession(l *loop, key conntrack.Key, f l4.Flow, held bool) *loopSession {
	flow := &f
	st := s.settings.Load()
	snap := s.snaps.Load()
	b := snap.Pick(flow, nil)
	if b == nil {
		s.releaseClient(l, f.Src.Addr(), held)
		s.sessions.Add(-1)
		if snap.Full(nil) {
			s.Stats.BackendsFull.Add(1)
			s.rateLog("every backend is at its max_sessions: datagram from a new session dropped")
			return nil
		}
		s.Stats.NoBackend.Add(1)
		s.rateLog("no usable backend for VIP: datagram dropped")
		return nil
	}
	fd, err := s.dialBackendFD(b)
	if err == nil {
		var r reg
		sess := l.newSession()
		*sess = loopSession{s: s, owner: l, key: key, client: flow.Src, backend: b, gen: sess.gen,
			log: st.LogConnections, startAt: l.now(), clientHeld: held}
		if s.wildcard {
			sess.replySrc = flow.Dst.Addr()
		}
		if r, err = l.add(fd, udpEvents, sess); err == nil {
			sess.reg, sess.open = r, true
			l.shared.sessions.Add(1)
			return s.recordSession(l, sess)
		}
		l.freeSession(sess)
		unix.Close(fd)
	}
	s.releaseClient(l, f.Src.Addr(), held)
	s.sessions.Add(-1)
	if !b.Release() {
		s.log.Error("live-flow count underflow: a flow was released twice", zap.String("backend", string(b.ID)))
	}
	s.Stats.SocketErrors.Add(1)
	if s.obs != nil && !localFailure(err) {
		s.obs.ConnectFailed(b, err)
	}
	s.rateLog("backend socket failed: datagram from a new client dropped", zap.String("backend", string(b.ID)), zap.Error(err))
	return nil
}

// reserveSession counts a new client's session if fewer than limit are
// live (0 = no limit). Check and count are one step: with a load and a
// later add, new clients on two loops could both take the last session
// (FuzzUDPSessions found 6 sessions under max_sessions = 5).
func (s *UDPService) reserveSession(limit int) bool {
	for {
		n := s.sessions.Load()
		if limit > 0 && n >= int64(limit) {
			return false
		}
		if s.sessions.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// recordSession puts a new session, already counted by reserveSession,
// in the table.
func (s *UDPService) recordSession(l *loop, sess *loopSession) *loopSession {
	if _, inserted, err := s.table.Insert(sess.key, sess.backend, sess); !inserted {
		// Only a closed table refuses; Insert released the count.
		s.closeSession(l, sess, l4.EndVIPClosed)
		s.rateLog("session not recorded", zap.Error(err))
		return nil
	}
	s.Stats.SessionsCreated.Add(1)
	sess.backend.Stats.Flows.Add(1)
	return sess
}

// dialBackendFD opens a connected, non-blocking UDP socket to b.
func (s *UDPService) dialBackendFD(b *l4.Backend) (int, error) {
	if s.self.wouldLoop(l4.UDP, b.Addr) {
		return -1, fmt.Errorf("%s: %w", b.Addr, errSelfConnect)
	}
	family := unix.AF_INET
	if b.Addr.Addr().Is6() && !b.Addr.Addr().Is4In6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, err
	}
	if err := connectNB(fd, b.Addr); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if s.self.covers(l4.UDP, b.Addr) && s.self.loops(l4.UDP, localAddrOf(fd, 0), b.Addr) {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %w", b.Addr, errSelfConnect)
	}
	return fd, nil
}

// onEvent: the session's backend socket is readable.
func (sess *loopSession) onEvent(l *loop, _ uint32) {
	sess.mustLive()
	sess.readable = true
	sess.relay(l)
}

func (sess *loopSession) again(l *loop, gen uint32) {
	if gen != sess.gen || !sess.open {
		return
	}
	sess.queued = false
	sess.relay(l)
}

// relay reads the backend's replies into the loop's outgoing batch of the
// VIP socket, until the socket is drained or the turn is used up.
func (sess *loopSession) relay(l *loop) {
	sess.mustLive()
	s := sess.s
	vs := s.ev.socks[l.id]
	for range vipRounds {
		if !sess.readable || !sess.open || vs.closed {
			return
		}
		if vs.nout == replyOut {
			vs.flush(l)
		}
		from := vs.nout
		want := min(replyBatch, replyOut-from)
		vs.out.prepRecvAt(from, want)
		n, err := recvmmsg(sess.reg.fd, vs.out.hdrs[from:from+want])
		switch {
		case err == unix.EAGAIN:
			sess.readable = false
			return
		case err == unix.EINTR:
			continue
		case err != nil:
			// ICMP port unreachable surfaces as ECONNREFUSED on a
			// connected UDP socket: a passive health mark.
			s.Stats.ReadErrors.Add(1)
			if err == unix.ECONNREFUSED {
				sess.backend.Stats.ConnectFails.Add(1)
				if s.obs != nil {
					s.obs.ConnectFailed(sess.backend, err)
				}
			}
			continue
		}
		sess.queue(l, vs, from, n)
		if !sess.open {
			return // the reply limit ended it
		}
		if n < want {
			sess.readable = false
			return
		}
	}
	if !sess.queued {
		sess.queued = true
		l.again = append(l.again, againEntry{t: sess, gen: sess.gen})
	}
}

// queue addresses the n replies just read at vs.out[from:] to the client
// and counts them; the loop sends them at the end of its round.
func (sess *loopSession) queue(l *loop, vs *udpSock, from, n int) {
	sess.mustLive()
	s := sess.s
	b := vs.out
	out := from
	for i := from; i < from+n; i++ {
		if b.truncated(i) {
			s.Stats.Truncated.Add(1)
			continue
		}
		size := int(b.hdrs[i].Len)
		if out != i {
			copy(b.buf(out), b.payload(i))
		}
		b.prepSend(out, size, sess.client, sess.replySrc)
		sess.backend.Stats.BytesOut.Add(uint64(size))
		sess.bytesOut += uint64(size)
		out++
	}
	got := out - from
	if got == 0 {
		return
	}
	vs.nout = out
	if !vs.flushing {
		vs.flushing = true
		l.flushes = append(l.flushes, vs)
	}
	sess.sent += got
	if !sess.replied && s.obs != nil {
		sess.replied = true
		s.obs.ConnectOK(sess.backend, 0) // a passive success: the backend lives
	}
	if limit := s.settings.Load().Responses; limit > 0 && sess.sent >= limit {
		sess.why = l4.EndResponses
		s.table.Delete(sess.key)
		return
	}
	s.table.Lookup(sess.key) // replies keep the session alive too
}

// flush sends the gathered replies; what the socket buffer does not take
// is dropped and counted.
func (vs *udpSock) flush(l *loop) {
	s := vs.s
	sent := 0
	for sent < vs.nout && !vs.closed {
		n, err := sendmmsg(vs.fd, vs.out.hdrs[sent:vs.nout])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			break
		}
		sent += n
	}
	s.Stats.Replies.Add(uint64(sent))
	if left := vs.nout - sent; left > 0 {
		s.Stats.Dropped.Add(uint64(left))
	}
	vs.nout = 0
}

// flushAll sends every VIP socket's gathered replies (end of a round).
func (l *loop) flushAll() {
	for i, vs := range l.flushes {
		vs.flushing = false
		if vs.nout > 0 {
			vs.flush(l)
		}
		l.flushes[i] = nil
	}
	l.flushes = l.flushes[:0]
}

// sessionEndedLoop is the table's end hook on the loops: the owning loop
// closes the session's socket (another goroutine, the sweeper or another
// loop's insert, may have ended it).
func (s *UDPService) sessionEndedLoop(_ conntrack.Key, e conntrack.Entry, r conntrack.Reason) {
	if sess, ok := e.Owner.(*loopSession); ok {
		sess.owner.endSession(sess, r)
	}
}

// sessionEnd names why the table ended sess (on its loop).
func sessionEnd(sess *loopSession, r conntrack.Reason) l4.EndReason {
	switch r {
	case conntrack.ReasonExpired:
		return l4.EndIdleTimeout
	case conntrack.ReasonEvicted:
		return l4.EndEvicted
	case conntrack.ReasonClosed:
		return l4.EndVIPClosed
	}
	if sess.why != l4.EndNone {
		return sess.why // udp_responses
	}
	return l4.EndMoved // the only other Delete: its backend stopped taking flows
}

// closeSession closes a session's socket on its loop and logs its end.
func (s *UDPService) closeSession(l *loop, sess *loopSession, why l4.EndReason) {
	sess.mustLive()
	if !sess.open {
		return
	}
	s.logSession(l, sess, why)
	s.releaseClient(l, sess.client.Addr(), sess.clientHeld)
	sess.open = false
	if why == l4.EndIdleTimeout && sess.sent == 0 && sess.datagramsIn > 0 {
		s.unanswered(sess)
	}
	l.shared.sessions.Add(-1)
	l.forget(&sess.reg)
	if d, err := socketDrops(sess.reg.fd); err == nil && d > 0 {
		s.Stats.ReplyQueueDrops.Add(d)
	}
	unix.Close(sess.reg.fd)
	s.sessions.Add(-1)
	l.freeSession(sess)
}

// errNoReply is the passive mark of a session its backend never
// answered.
var errNoReply = errors.New("no reply to any datagram of a session before session_timeout")

// unanswered counts a session that ended by session_timeout without a
// reply to any of its datagrams. When the VIP expects replies
// (udp_responses) that is a passive health mark, as a connect that timed
// out is for TCP. A warning, at most every 10 s per VIP, says so when
// replies are expected or the VIP has relayed some: a protocol that
// never answers (syslog, metrics) gets neither mark nor warning.
func (s *UDPService) unanswered(sess *loopSession) {
	b := sess.backend
	n := b.Stats.Unanswered.Add(1)
	expected := s.settings.Load().Responses > 0
	if expected && s.obs != nil {
		s.obs.ConnectFailed(b, errNoReply)
	}
	if (expected || s.Stats.Replies.Load() > 0) && s.silent.allow() {
		s.log.Warn("udp backend answered none of a session's datagrams before session_timeout", zap.Stringer("listen", s.key),
			zap.String("backend", string(b.ID)), zap.Uint64("datagrams", sess.datagramsIn), zap.Uint64("unanswered_sessions", n),
			zap.Bool("passive_mark", expected))
	}
}

// releaseClient gives back a session's per-client count, if it took one.
func (s *UDPService) releaseClient(l *loop, addr netip.Addr, held bool) {
	if held {
		s.clients.Release(addr, l.now())
	}
}

// endSession hands a session to its loop to close.
func (l *loop) endSession(sess *loopSession, why conntrack.Reason) {
	l.posted.mu.Lock()
	l.posted.ended = append(l.posted.ended, endedSession{sess: sess, gen: sess.gen, why: why})
	l.posted.mu.Unlock()
	l.wake()
}

// newSession hands out a session struct from the loop's free list.
func (l *loop) newSession() *loopSession {
	var sess *loopSession
	if n := len(l.free.sessions); n > 0 {
		sess = l.free.sessions[n-1]
		l.free.sessions = l.free.sessions[:n-1]
	} else {
		sess = new(loopSession)
	}
	sess.gen = l.nextGen()
	return sess
}

// recycleSession takes a closed session struct back for reuse; freeSession
// calls it (see recycleConn).
func (l *loop) recycleSession(sess *loopSession) {
	if len(l.free.sessions) < maxFreeConns {
		*sess = loopSession{gen: sess.gen}
		l.free.sessions = append(l.free.sessions, sess)
	}
}

// closeEnded closes the sessions other goroutines ended.
func (l *loop) closeEnded(ended []endedSession) {
	for i, e := range ended {
		if e.sess.gen == e.gen && e.sess.open {
			e.sess.s.closeSession(l, e.sess, sessionEnd(e.sess, e.why))
		}
		ended[i] = endedSession{}
	}
}
