// Established TCP connections handed to another process (an upgrade): the
// old loops stop reading a connection and take its sockets out of their
// epoll sets; bytes it holds in a pipe go with it (the pipe's descriptors
// travel beside the sockets: the kernel keeps the bytes), bytes held in
// user space (no pipe could be had) are written out first; the new
// process adopts the sockets, the pipes and the connection's state into
// its own loops. None of this runs outside an upgrade.

package proxy

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
)

// ConnState is an established connection as the next process needs it,
// besides its descriptors (FDs). Bytes the old process read and had not
// written travel in their pipe (PendingUp, PendingDown), or were flushed
// before.
type ConnState struct {
	VIP         string         `json:"vip"`             // l4.VIPKey.String()
	Route       string         `json:"route,omitempty"` // the SNI route that chose its backend; "" = the VIP's own backends
	Backend     l4.BackendID   `json:"backend"`
	BackendAddr netip.AddrPort `json:"backend_addr"`
	Client      netip.AddrPort `json:"client"`
	Local       netip.AddrPort `json:"local"` // the VIP address the client reached
	Loop        int            `json:"loop"`  // the old process's loop: the new one spreads alike
	Started     time.Time      `json:"started"`
	// StartedMono is the accept on the host's CLOCK_MONOTONIC (shared by
	// both processes, unlike Go's monotonic reading, and blind to steps of
	// the wall clock); 0 from an older process: Started is used.
	StartedMono int64 `json:"started_mono,omitempty"`
	// ConnectTime is how long the backend took to answer (the log line's
	// connect_time); Retries how many connects failed before it.
	ConnectTime time.Duration `json:"connect_time,omitempty"`
	Retries     int           `json:"retries,omitempty"`
	BytesIn     uint64        `json:"bytes_in"`  // client to backend
	BytesOut    uint64        `json:"bytes_out"` // backend to client
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	Quiet       time.Duration `json:"quiet"` // since the last byte moved (the idle timer's base)
	// ClientEOF: the client's FIN was passed on to the backend;
	// BackendEOF: the backend's to the client (half-closed connections).
	ClientEOF  bool `json:"client_eof,omitempty"`
	BackendEOF bool `json:"backend_eof,omitempty"`
	SpliceUp   bool `json:"splice_up,omitempty"`
	SpliceDown bool `json:"splice_down,omitempty"`
	// PendingUp and PendingDown are bytes read from the client (backend)
	// and not yet written to the backend (client): they wait in a pipe
	// whose two descriptors follow the sockets. ClientFIN (BackendFIN):
	// that side's FIN came after them and is passed on once they are.
	PendingUp   int  `json:"pending_up,omitempty"`
	PendingDown int  `json:"pending_down,omitempty"`
	ClientFIN   bool `json:"client_fin,omitempty"`
	BackendFIN  bool `json:"backend_fin,omitempty"`
}

// FDCount is how many descriptors come with the connection: its two
// sockets, then the read and write ends of the pipe of each direction
// with pending bytes (up first).
func (st *ConnState) FDCount() int {
	n := 2
	if st.PendingUp > 0 {
		n += 2
	}
	if st.PendingDown > 0 {
		n += 2
	}
	return n
}

// DetachedConn is a connection off its loop: its sockets are open and in
// no epoll set, its state frozen, until Release or Restore.
type DetachedConn struct {
	State ConnState
	FDs   []int // its descriptors, as State.FDCount says
	// Flushed: it held bytes (pipes, buffers) when it was frozen, and
	// they were written out before the handover.
	Flushed bool
	// Piped: it holds bytes in flight, which go with it in their pipes.
	Piped bool
	c     *evConn
	l     *loop
	gen   uint32
}

// HandoverStats says what a detach did.
type HandoverStats struct {
	Detached int // flushed and off their loops (handed to emit; each says whether it held bytes)
	Kept     int // not flushed in time, or still connecting: they stay
}

// DetachConns takes the established connections of svcs (which share
// their loops) off the loops: each stops reading and leaves the epoll
// sets; with pipes (the next process adopts pipes), bytes it holds in a
// pipe go with it, and what it holds otherwise (all of it, without pipes)
// is written out first. Every pass over the loops hands the connections
// ready so far to emit, which owns them from then on (ReleaseConns or
// RestoreConns), so one that is ready at once waits for no other. A
// connection that cannot flush within flush, and one still connecting by
// then, goes on here and counts as kept. An error from emit stops the
// detach: the connections still frozen go back to work, and it is
// returned. Accepting must be paused before.
func DetachConns(svcs []*TCPService, flush time.Duration, pipes bool, emit func([]*DetachedConn) error) (HandoverStats, error) {
	var st HandoverStats
	if len(svcs) == 0 {
		return st, nil
	}
	want := make(map[*TCPService]bool, len(svcs))
	for _, s := range svcs {
		want[s] = true
	}
	ls := svcs[0].ev.loops
	restore := func() int {
		var mu sync.Mutex
		n := 0
		ls.each(func(l *loop) {
			k := l.restoreHanding()
			mu.Lock()
			n += k
			mu.Unlock()
		})
		return n
	}
	deadline := time.Now().Add(flush)
	for {
		var mu sync.Mutex
		var ready []*DetachedConn
		pending, connecting := 0, 0
		ls.each(func(l *loop) {
			r, left := l.detachPass(want, pipes)
			mu.Lock()
			ready = append(ready, r...)
			pending += left
			mu.Unlock()
		})
		st.Detached += len(ready)
		if len(ready) > 0 {
			if err := emit(ready); err != nil {
				st.Kept += restore()
				return st, err
			}
		}
		for _, s := range svcs {
			connecting += int(s.Stats.Active.Load() - s.ev.live.Load())
		}
		if pending == 0 && connecting <= 0 {
			return st, nil
		}
		if time.Now().After(deadline) {
			st.Kept += restore() + max(connecting, 0)
			return st, nil
		}
		time.Sleep(time.Millisecond)
	}
}

// detachPass, on the loop, freezes the open connections of the wanted
// services and readies every frozen one it can (see DetachConns); it
// returns those ready and how many still hold bytes to flush.
func (l *loop) detachPass(want map[*TCPService]bool, pipes bool) ([]*DetachedConn, int) {
	for c := range l.conns {
		if want[c.svc] && c.state == evOpen && !c.stays && !c.kernel { // kernel-forwarded ones stay here (evkernel.go)
			held := c.up.pending > 0 || c.down.pending > 0
			delete(l.conns, c)
			c.state = evHanding
			l.withdraw(&c.clientSock.reg)
			l.withdraw(&c.backendSock.reg)
			l.handing = append(l.handing, handingConn{c: c, gen: c.gen, held: held})
		}
	}
	var ready []*DetachedConn
	keep := l.handing[:0]
	for _, h := range l.handing {
		c := h.c
		if c.gen != h.gen || c.state != evHanding {
			continue // it ended while flushing (a reset, or both FINs passed)
		}
		piped := pipes && c.pipedOnly()
		if !piped && !c.flushHanding(l) {
			if c.state == evHanding {
				keep = append(keep, h)
			}
			continue
		}
		d := &DetachedConn{State: c.handoverState(l), FDs: c.handoverFDs(), c: c, l: l, gen: c.gen}
		d.Piped = d.State.PendingUp+d.State.PendingDown > 0
		d.Flushed = h.held && !d.Piped
		ready = append(ready, d)
	}
	clear(l.handing[len(keep):])
	l.handing = keep
	return ready, len(keep)
}

// handingConn is a connection frozen for a handover, still flushing.
type handingConn struct {
	c    *evConn
	gen  uint32
	held bool // it held bytes when frozen
}

// flushHanding writes out what each direction holds; true once nothing is
// left (and the connection is still handed over).
func (c *evConn) flushHanding(l *loop) bool {
	c.mustLive()
	for _, d := range [2]*evDir{&c.up, &c.down} {
		if d.pending > 0 && !c.flush(l, d) {
			return false
		}
		if c.state != evHanding {
			return false
		}
	}
	return true
}

// restoreHanding puts the connections still flushing back to work here.
func (l *loop) restoreHanding() int {
	n := 0
	for _, h := range l.handing {
		if h.c.gen == h.gen && h.c.state == evHanding {
			h.c.resume(l)
			n++
		}
	}
	clear(l.handing)
	l.handing = l.handing[:0]
	return n
}

// pipedOnly reports whether every byte c holds is in a pipe (none in a
// buffer of its own), so that it can go as it is.
func (c *evConn) pipedOnly() bool {
	c.mustLive()
	for _, d := range [2]*evDir{&c.up, &c.down} {
		if d.pending > 0 && d.pipe == nil {
			return false
		}
	}
	return true
}

// handoverFDs are the descriptors that go with c (ConnState.FDCount).
func (c *evConn) handoverFDs() []int {
	c.mustLive()
	fds := []int{c.clientSock.fd, c.backendSock.fd}
	for _, d := range [2]*evDir{&c.up, &c.down} {
		if d.pending > 0 {
			fds = append(fds, d.pipe.r, d.pipe.w)
		}
	}
	return fds
}

// handoverState is the connection's state for the next process.
func (c *evConn) handoverState(l *loop) ConnState {
	c.mustLive()
	now := l.now()
	route := ""
	if c.pick.rt != nil {
		route = c.pick.rt.Name
	}
	return ConnState{
		VIP: c.svc.key.String(), Route: route, Backend: c.chosen.ID, BackendAddr: c.chosen.Addr,
		Client: c.flow.Src, Local: c.flow.Dst, Loop: l.id,
		Started:     time.Now().Add(-time.Duration(now - c.times.acceptAt)),
		StartedMono: hostMono() - (now - c.times.acceptAt),
		ConnectTime: time.Duration(c.times.connectAt - c.times.acceptAt),
		Retries:     max(int(c.pick.attempts)-1, 0),
		BytesIn:     c.up.n,
		BytesOut:    c.down.n,
		IdleTimeout: time.Duration(c.times.idle),
		Quiet:       time.Duration(now - c.lastActive()),
		ClientEOF:   c.up.done, BackendEOF: c.down.done,
		SpliceUp: c.up.splice, SpliceDown: c.down.splice,
		PendingUp: c.up.pending, PendingDown: c.down.pending,
		ClientFIN: c.up.eof && !c.up.done, BackendFIN: c.down.eof && !c.down.done,
	}
}

// ReleaseConns ends detached connections here once the next process holds
// their sockets: closing this process's descriptors leaves the sockets
// open there (no FIN, no reset), and the accounting ends as for a closed
// connection.
func ReleaseConns(ds []*DetachedConn) { onLoops(ds, (*evConn).released) }

// RestoreConns puts detached connections back to work here (the next
// process did not take them): they stay here, and a later pass of the
// same detach leaves them alone.
func RestoreConns(ds []*DetachedConn) {
	onLoops(ds, func(c *evConn, l *loop) {
		c.stays = true
		c.resume(l)
	})
}

// onLoops runs fn on each connection's loop (one task per loop) and waits.
func onLoops(ds []*DetachedConn, fn func(*evConn, *loop)) {
	byLoop := map[*loop][]*DetachedConn{}
	for _, d := range ds {
		byLoop[d.l] = append(byLoop[d.l], d)
	}
	var wg sync.WaitGroup
	for l, list := range byLoop {
		wg.Add(1)
		l.post(func() {
			defer wg.Done()
			for _, d := range list {
				if d.c.gen == d.gen && d.c.state == evHanding {
					fn(d.c, l)
				}
			}
		})
	}
	wg.Wait()
}

// released is finish without touching the sockets' state: they live on
// in the other process.
func (c *evConn) released(l *loop) {
	c.mustLive()
	l.putApp(c) // the next process follows no framing of it (it starts mid-stream)
	c.state = evClosed
	for _, sk := range [2]*sock{&c.clientSock, &c.backendSock} {
		if sk.fd >= 0 {
			closeFD(sk.fd)
			sk.fd = -1
		}
	}
	for _, d := range [2]*evDir{&c.up, &c.down} {
		if d.pipe != nil && d.pending > 0 {
			l.pipes.pool.discard(d.pipe) // the next process holds the pipe and its bytes
			d.pipe = nil
			continue
		}
		c.putPipe(l, d) // empty
	}
	c.endReplay(l)
	s := c.svc
	s.release(c.chosen)
	s.untrackEv(l, c)
	l.shared.live.Add(-1)
	s.evConnDone(l, c)
	l.freeConn(c)
}

// resume puts a frozen connection back in the epoll set and to work.
func (c *evConn) resume(l *loop) {
	c.mustLive()
	c.state = evOpen
	c.queued = false // an again entry of before may be gone
	for _, sk := range [2]*sock{&c.clientSock, &c.backendSock} {
		h := &c.cEnd
		if sk == &c.backendSock {
			h = &c.bEnd
		}
		r, err := l.add(sk.fd, sockEvents, h)
		if err != nil {
			c.finish(l, true, true, l4.EndLocalError)
			return
		}
		sk.reg = r
		sk.readable, sk.writable = true, true // an edge may have passed meanwhile
	}
	l.conns[c] = struct{}{}
	c.armTimers(l)
	c.pump(l)
}

// armTimers arms the idle check and the backend keepalive of an open
// connection that arrived from elsewhere (a timer that fired meanwhile
// found it frozen and did nothing).
func (c *evConn) armTimers(l *loop) {
	c.mustLive()
	if c.times.idle > 0 {
		wait := c.times.idle - (l.now() - c.lastActive())
		l.after(time.Duration(max(wait, int64(time.Millisecond))), c, c.gen<<2|timerIdle)
	}
	if c.st.KeepAlive > 0 {
		l.after(keepAliveAfter, c, c.gen<<2|timerKeepAlive)
	}
}

// AdoptConn takes over a connection another process detached: fds are its
// descriptors as st.FDCount says (owned from now on; on an error the
// caller still owns them), b its backend here. It counts against
// max_conns and the process budget even above them (the connection exists
// already), holds a live flow on b, and runs on the loop matching the old
// one. A pipe must hold exactly the pending bytes st says.
func (s *TCPService) AdoptConn(st ConnState, fds []int, b *l4.Backend) error {
	if len(fds) != st.FDCount() || st.PendingUp < 0 || st.PendingDown < 0 {
		return fmt.Errorf("%d descriptors for a connection that needs %d", len(fds), st.FDCount())
	}
	at := 2
	for _, n := range [2]int{st.PendingUp, st.PendingDown} {
		if n == 0 {
			continue
		}
		held, err := unix.IoctlGetInt(fds[at], unix.TIOCINQ) // FIONREAD: the bytes a pipe holds
		if err != nil || held != n {
			return fmt.Errorf("a pipe holds %d bytes (%v), the connection says %d", held, err, n)
		}
		at += 2
	}
	s.limit.force()
	if s.budget != nil {
		s.budget.force()
	}
	b.Acquire()
	s.Stats.Active.Add(1)
	s.wg.Add(1)
	loops := s.ev.loops.loops
	l := loops[st.Loop%len(loops)]
	l.post(func() { s.adoptOn(l, st, fds, b) })
	return nil
}

// adoptOn builds the adopted connection on loop l and starts moving bytes.
func (s *TCPService) adoptOn(l *loop, st ConnState, fds []int, b *l4.Backend) {
	c := l.newConn()
	*c = evConn{svc: s, st: s.settings.Load(), gen: c.gen, chosen: b, state: evHanding,
		pick: connPick{snap: s.snaps.Load(), aff: s.affinity.Load()}}
	if st.Route != "" {
		c.pick.rt = s.routes.Load().byName(st.Route) // its passive marks go to the route's health
	}
	c.cEnd, c.bEnd = evEnd{c: c}, evEnd{c: c, backend: true}
	c.flow = l4.Flow{Src: st.Client, Dst: st.Local, Proto: l4.TCP}
	c.clientSock.reg, c.backendSock.reg = reg{fd: fds[0], slot: -1}, reg{fd: fds[1], slot: -1}
	now := l.now()
	c.times.acceptAt = now - acceptAge(st)
	c.times.connectAt = c.times.acceptAt + max(int64(st.ConnectTime), 1) // connected: never 0
	c.pick.lastTried, c.pick.attempts = b, int32(1+st.Retries)
	c.times.idle = int64(st.IdleTimeout)
	c.up = evDir{src: &c.clientSock, dst: &c.backendSock, bytes: &b.Stats.BytesIn, n: st.BytesIn,
		eof: st.ClientEOF || st.ClientFIN, done: st.ClientEOF, splice: st.SpliceUp}
	c.down = evDir{src: &c.backendSock, dst: &c.clientSock, bytes: &b.Stats.BytesOut, n: st.BytesOut,
		eof: st.BackendEOF || st.BackendFIN, done: st.BackendEOF, splice: st.SpliceDown}
	c.up.at = now - int64(st.Quiet) // both ways as quiet: no request is taken to wait
	c.down.at = c.up.at
	at := 2
	for _, d := range [2]*evDir{&c.up, &c.down} {
		n := st.PendingUp
		if d == &c.down {
			n = st.PendingDown
		}
		if n > 0 {
			d.pipe, d.pending = l.pipes.pool.adopt(fds[at], fds[at+1]), n
			at += 2
		}
	}
	l.shared.live.Add(1)
	if !s.trackEv(l, c) {
		c.finish(l, true, true, l4.EndDrain) // the service is shutting down
		return
	}
	delete(l.conns, c) // resume puts it back
	if c.pick.aff != nil {
		_ = c.pick.aff.Set(s.key, st.Client.Addr(), b)
	}
	c.resume(l)
}

// force takes a max_conns slot even at the limit (an adopted connection).
func (l *limiter) force() { l.n.Add(1) }

// force takes a budget slot even at the cap (an adopted connection).
func (b *ConnBudget) force() { b.used.Add(1) }

// closeSockets closes descriptors a caller could not hand over.
func CloseSockets(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// hostMono is the host's CLOCK_MONOTONIC in nanoseconds: one clock for
// the old and the new process of an upgrade, which a wall-clock step does
// not move.
func hostMono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// acceptAge is how long ago a handed-over connection was accepted: on the
// host's monotonic clock when the old process sent it, else (an older
// process) by the wall clock.
func acceptAge(st ConnState) int64 {
	if now := hostMono(); st.StartedMono > 0 && now > 0 {
		return max(now-st.StartedMono, 0)
	}
	return int64(time.Since(st.Started))
}
