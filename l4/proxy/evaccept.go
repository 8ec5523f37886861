// Accepting on event loops: one listening socket per VIP, in every loop's
// epoll set with EPOLLEXCLUSIVE, so a new connection wakes one loop,
// which then owns it.

package proxy

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
)

// acceptBatch bounds the connections one wake-up accepts, so that a flood
// on one VIP cannot hold a loop.
const acceptBatch = 16

// evService is the event-loop side of a TCPService.
type evService struct {
	loops  *Loops
	kernel *KernelFwd      // process-wide kernel forwarding; nil = none
	fd     int             // the listener's descriptor (a dup, owned here)
	regs   []reg           // the listener's registration, per loop
	pause  []int64         // per loop: accepting paused until then (loop clock), after a failure
	back   []time.Duration // per loop: the next accept-failure pause
	live   atomic.Int64    // connections open (proxying)
	// refuse: the final reset of a drain runs; connections that finish
	// their connect now are ended at once.
	refuse atomic.Bool
	// goodbye is the WebSocket close code a drain or shutdown tells
	// (evboundary.go); 0 = none under way.
	goodbye atomic.Uint32

	// accepting: no limit is reached; the loops' registrations follow it.
	accepting atomic.Bool
	// paused: another process takes this listener's connections (an
	// upgrade); the socket stays open.
	paused    atomic.Bool
	closed    atomic.Bool
	closeOnce sync.Once

	stall stallWatch // the watch of stalled backends (stall_timeout; stallwatch.go)
}

// listenerHandler is the listener's epoll handler on one loop.
type listenerHandler struct{ s *TCPService }

func (h listenerHandler) onEvent(l *loop, _ uint32) { h.s.acceptOn(l) }

// serveLoops registers the listener with every loop; it returns once the
// service is closed, as Serve does.
func (s *TCPService) serveLoops() {
	e := s.ev
	e.accepting.Store(true)
	e.loops.each(func(l *loop) { s.syncAccept(l) })
	<-s.stop.ch
	s.closeLoops()
}

// syncAccept makes loop l's listener registration match the service's
// state: registered while accepting, not paused and not closed.
func (s *TCPService) syncAccept(l *loop) {
	e := s.ev
	want := e.accepting.Load() && !e.closed.Load() && !e.paused.Load() && l.now() >= e.pause[l.id]
	r := &e.regs[l.id]
	switch {
	case want && r.slot < 0:
		nr, err := l.add(e.fd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE, listenerHandler{s})
		if err != nil {
			s.logs.accept.warn(s.log, "cannot watch the listener", zap.Stringer("listen", s.key), zap.Error(err))
			return
		}
		*r = nr
	case !want && r.slot >= 0:
		l.withdraw(r)
	}
}

// resumeAll re-registers the listener on every loop (after a limit freed).
func (s *TCPService) resumeAll() {
	for _, l := range s.ev.loops.loops {
		l.post(func() { s.syncAccept(l) })
	}
}

// acceptOn accepts up to acceptBatch connections on loop l.
func (s *TCPService) acceptOn(l *loop) {
	e := s.ev
	for range acceptBatch {
		if !s.takeSlots() {
			return
		}
		if s.underPressure(l) {
			s.releaseSlots()
			s.pauseAccept(l, 20*time.Millisecond)
			return
		}
		fd, err := accept4(e.fd, &l.scratch.peer)
		if err != nil {
			s.releaseSlots()
			if err == unix.EAGAIN || err == unix.EINTR {
				return
			}
			if err == unix.ECONNABORTED {
				continue
			}
			s.Stats.AcceptErrors.Add(1)
			b := acceptBackoff(err, e.back[l.id])
			e.back[l.id] = b
			s.logs.accept.warn(s.log, "accept failed", zap.Stringer("listen", s.key), zap.Error(err), zap.Duration("backoff", b))
			s.pauseAccept(l, b)
			return
		}
		e.back[l.id] = 0
		s.Stats.Accepted.Add(1)
		s.wg.Add(1)
		src := getSockaddr(&l.scratch.peer)
		if to := e.loops.lighter(l); to != nil {
			to.handOff(handoff{s: s, fd: fd, src: src})
			continue
		}
		s.startConn(l, fd, src)
	}
}

// handoffSlack is how many more connections than an idle loop a loop
// holds before it passes new ones on. Without passing on, the loop that
// epoll wakes first takes every connection while load is light, and
// long-lived connections (database pools, WebSockets) pile up on it, to
// be served by one core when they all turn busy.
const handoffSlack = 4

// lighter returns a loop holding handoffSlack fewer connections than l,
// or nil: l keeps the connection. Only loops asleep in epoll_wait, or
// awake for less than saturatedAfter, qualify: a saturated loop is never
// handed more. (A loop woken a moment ago qualifies because a listener's
// wake-up may reach more than one loop.)
func (ls *Loops) lighter(l *loop) *loop {
	if len(ls.loops) == 1 {
		return nil
	}
	var best *loop
	least := l.shared.live.Load() - handoffSlack
	now := l.now()
	for _, o := range ls.loops {
		if n := o.shared.live.Load(); o != l && n < least && !o.saturated(now) {
			best, least = o, n
		}
	}
	return best
}

// saturatedAfter is how long a loop must have been busy without a break
// (out of epoll_wait) to count as saturated.
const saturatedAfter = time.Millisecond

// saturated reports whether loop o has been busy since before
// now - saturatedAfter (now on the loops' shared clock).
func (o *loop) saturated(now int64) bool {
	since := o.shared.awakeSince.Load()
	return since != 0 && now-since > int64(saturatedAfter)
}

// handoff is an accepted connection passed to another loop.
type handoff struct {
	s   *TCPService
	fd  int
	src netip.AddrPort
}

// takeSlots takes a max_conns slot and a process budget slot without
// waiting; at a limit it stops accepting on every loop (clients wait in
// the listen backlog) until a connection ends (of this VIP for max_conns,
// of any VIP for the budget) or a reload raises max_conns.
func (s *TCPService) takeSlots() bool {
	if !s.limit.tryAcquire() {
		s.stopAccepting(s.vipFull)
		s.tryResume() // the last connection may have ended meanwhile
		return false
	}
	if s.budget != nil && !s.budget.tryAcquire() {
		s.limit.release()
		s.stopAccepting(s.processFull)
		s.budget.wait(s)
		return false
	}
	return true
}

// tryResume starts accepting again on every loop when no limit holds the
// VIP back any more.
func (s *TCPService) tryResume() {
	e := s.ev
	if e.closed.Load() || e.accepting.Load() || !s.limit.room() || s.budget != nil && !s.budget.room() {
		return
	}
	if !e.accepting.Swap(true) {
		s.resumeAll()
	}
}

// stopAccepting pauses every loop's accepting at a limit.
func (s *TCPService) stopAccepting(full func()) {
	if s.ev.accepting.Swap(false) {
		full()
		for _, l := range s.ev.loops.loops {
			l.post(func() { s.syncAccept(l) })
		}
	}
}

// pressureFor is how long accepting pauses after a local-resource failure.
const pressureFor = 100 * time.Millisecond

// notePressure records a local-resource failure at loop l's clock.
func (s *TCPService) notePressure(l *loop) { s.pressure.Store(l.now()) }

// underPressure reports whether a local resource failed very recently.
// Both times are on the loops' shared monotonic clock (never 0), so a
// step of the wall clock cannot pause accepting for as long as it jumped
// back (a wall-clock Unix time compared with time.Since would).
func (s *TCPService) underPressure(l *loop) bool {
	last := s.pressure.Load()
	return last != 0 && l.now()-last < int64(pressureFor)
}

// pauseAccept stops loop l accepting for d.
func (s *TCPService) pauseAccept(l *loop, d time.Duration) {
	e := s.ev
	e.pause[l.id] = l.now() + int64(max(d, time.Millisecond))
	s.syncAccept(l)
	l.after(d, acceptResume{s}, 0)
}

// acceptResume re-registers a paused listener when its pause ends.
type acceptResume struct{ s *TCPService }

func (a acceptResume) onTimer(l *loop, _ uint32) { a.s.syncAccept(l) }
func (a acceptResume) pending(uint32) bool       { return true }

// evConnDone is the end of a connection's accounting on the loops.
func (s *TCPService) evConnDone(l *loop, c *evConn) {
	c.mustLive()
	l.unwait(c)
	c.leaveQueue()
	c.unhold(false)
	if c.in.clients {
		s.clients.Release(c.flow.Src.Addr(), l.now())
		c.in.clients = false
	}
	s.Stats.Active.Add(-1)
	s.releaseSlots()
	s.tryResume()
	s.wg.Done()
}

// trackEv registers an open connection with its loop; false once the
// service is shutting down.
func (s *TCPService) trackEv(l *loop, c *evConn) bool {
	c.mustLive()
	if s.ev.refuse.Load() {
		return false
	}
	l.conns[c] = struct{}{}
	c.in.conns = true
	s.ev.live.Add(1)
	return true
}

func (s *TCPService) untrackEv(l *loop, c *evConn) {
	c.mustLive()
	delete(l.conns, c)
	c.in.conns = false
	s.ev.live.Add(-1)
}

// closeLoops takes the listener off every loop, then closes it.
func (s *TCPService) closeLoops() {
	e := s.ev
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		if s.budget != nil {
			s.budget.forget(s)
		}
		e.loops.each(func(l *loop) { s.syncAccept(l) })
		unix.Close(e.fd)
	})
}

// resetWhereLoops resets the matching connections on every loop.
func (s *TCPService) resetWhereLoops(match func(*l4.Backend) bool, why l4.EndReason) int {
	var n atomic.Int64
	s.ev.loops.each(func(l *loop) {
		for c := range l.conns {
			if c.svc == s && match(c.chosen) {
				if c.app != nil && c.app.asked && !c.app.bye && c.state == evOpen {
					s.Stats.BoundaryFallbacks.Add(1) // asked, it never stood at a boundary in time
				}
				c.finish(l, true, true, why)
				n.Add(1)
			}
		}
	})
	return int(n.Load())
}

// resetWaitingLoops resets the service's connections still waiting in a
// pre-read stage or for a backend slot (a drain's end must not wait for
// their timeouts, which may be long).
func (s *TCPService) resetWaitingLoops() int {
	var n atomic.Int64
	s.ev.loops.each(func(l *loop) {
		for c := range l.waiting {
			if c.svc == s {
				c.finish(l, true, false, l4.EndDrain)
				n.Add(1)
			}
		}
	})
	return int(n.Load())
}

// wait puts c in the loop's waiting set.
func (l *loop) wait(c *evConn) {
	if !c.in.waiting {
		c.in.waiting = true
		l.waiting[c] = struct{}{}
	}
}

// unwait takes c out of the waiting set, if it is there.
func (l *loop) unwait(c *evConn) {
	if c.in.waiting {
		c.in.waiting = false
		delete(l.waiting, c)
	}
}

// drainLoops waits for the connections to end until ctx is done, then
// resets the rest.
func (s *TCPService) drainLoops(ctx context.Context) int {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return 0
	case <-ctx.Done():
	}
	s.ev.refuse.Store(true)
	n := s.resetWhereLoops(func(*l4.Backend) bool { return true }, l4.EndDrain)
	n += s.resetWaitingLoops()
	<-done
	return n
}

// newEvService prepares the event-loop side of s: it takes the
// listener's socket over (a dup of its descriptor; the original closes).
func newEvService(s *TCPService, loops *Loops) (*evService, error) {
	raw, err := s.ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := raw.Control(func(f uintptr) { fd, derr = unix.Dup(int(f)) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("dup listener: %w", derr)
	}
	unix.CloseOnExec(fd)
	// The loops own the socket through the dup. Go's netpoller must not
	// watch it as well: it would wake a runtime thread for every new
	// connection, for nobody.
	_ = s.ln.Close()
	n := loops.Len()
	e := &evService{loops: loops, fd: fd, regs: make([]reg, n), pause: make([]int64, n), back: make([]time.Duration, n)}
	for i := range e.regs {
		e.regs[i] = reg{fd: fd, slot: -1}
	}
	return e, nil
}

// newConn hands out a connection struct from the loop's free list.
func (l *loop) newConn() *evConn {
	var c *evConn
	if n := len(l.free.conns); n > 0 {
		c = l.free.conns[n-1]
		l.free.conns = l.free.conns[:n-1]
	} else {
		c = new(evConn)
	}
	c.gen = l.nextGen()
	return c
}

// recycleConn takes a finished connection struct back for reuse (its
// timers and events are stale by generation). freeConn calls it: at once,
// or (built with l4lbpoison) after a quarantine.
func (l *loop) recycleConn(c *evConn) {
	if len(l.free.conns) < maxFreeConns {
		held := c.up.held[:0]
		*c = evConn{gen: c.gen, state: evClosed}
		c.up.held = held
		l.free.conns = append(l.free.conns, c)
	}
}

// maxFreeConns bounds a loop's free list of connection structs.
const maxFreeConns = 1024

// nextGen is a fresh generation for a connection's timers (30 bits: a
// timer carries it shifted left by two, with its kind).
func (l *loop) nextGen() uint32 {
	l.gen = (l.gen + 1) & (1<<30 - 1)
	return l.gen
}
