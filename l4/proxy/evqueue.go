// Connections waiting for a backend slot: every backend of the VIP was at
// its max_conns or over its max_conn_rate when they came, or none was
// eligible and failover_hold holds them (evhold.go). FIFO per VIP across
// the loops.

package proxy

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// evQueued: accepted, no backend dialed, waiting in the VIP's queue for a
// backend to free a slot (declared here, beside its code, after
// evpreread.go's state).
const evQueued = evPreRead + 1

// queuePoll is how often a waiting connection looks for room itself: the
// wake-ups on release and publish serve waiters at once, this only bounds
// the delay of one that lost a race (a slot freed while the waiter was
// between a pick and its place in the queue, or taken by a retry).
const queuePoll = 200 * time.Millisecond

// waitQueue is a VIP's connections waiting for a backend slot, oldest
// first. Any loop may serve or leave it, so it is locked; the paths that
// run when nobody waits (every release) read only n. A VIP with SNI routes
// keeps one queue for all of them, each waiter with the store it picks
// from: a slot is offered to the oldest waiter whose store has room, so a
// full route never holds up another one.
type waitQueue struct {
	token tokenWake    // serves it when a backend over its max_conn_rate has a token again
	n     atomic.Int64 // len(q)
	mu    sync.Mutex
	q     []waiter
}

// waiter is a connection in the queue, on the loop that owns it; gen tells
// a reused connection struct from the one that queued; store is what it
// picks from (the VIP's, or its SNI route's). failedOn: held after its
// connects failed on every backend of that snapshot generation (evhold.go),
// it is served only from a newer one; 0 = any.
type waiter struct {
	l        *loop
	c        *evConn
	gen      uint32
	store    *snapshot.Store
	failedOn uint64
}

func (q *waitQueue) push(w waiter, front bool) {
	q.mu.Lock()
	if front {
		q.q = slices.Insert(q.q, 0, w)
	} else {
		q.q = append(q.q, w)
	}
	q.n.Store(int64(len(q.q)))
	q.mu.Unlock()
}

// pop takes the oldest waiter whose store has a backend below its cap
// and rate (each store's snapshot is looked at once). Finding none, it
// returns the soonest a backend over its max_conn_rate of a store without
// room has a token again (0: none waits on a rate).
func (q *waitQueue) pop() (waiter, time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var full []*snapshot.Store // stores seen without room: few (a VIP and its routes)
	var tokenIn time.Duration
	for i, w := range q.q {
		if slices.Contains(full, w.store) {
			continue
		}
		snap := w.store.Load()
		if w.failedOn != 0 && snap.Generation() == w.failedOn {
			continue // every backend of this snapshot failed it: wait for the next
		}
		if !snap.Room() {
			full = append(full, w.store)
			if d := snap.RateWait(); d > 0 && (tokenIn == 0 || d < tokenIn) {
				tokenIn = d
			}
			continue
		}
		q.q = slices.Delete(q.q, i, i+1)
		q.n.Store(int64(len(q.q)))
		return w, 0, true
	}
	return waiter{}, tokenIn, false
}

// has reports whether a connection picking from store waits for room (a
// waiter held for a newer snapshot does not count: a new connection may
// try the current one).
func (q *waitQueue) has(store *snapshot.Store) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.ContainsFunc(q.q, func(w waiter) bool { return w.store == store && w.failedOn == 0 })
}

// remove takes c out (it ended while waiting); a no-op when it was popped
// already (serveWaiter then finds it gone and passes the slot on).
func (q *waitQueue) remove(c *evConn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.IndexFunc(q.q, func(w waiter) bool { return w.c == c && w.gen == c.gen }); i >= 0 {
		q.q = slices.Delete(q.q, i, i+1)
		q.n.Store(int64(len(q.q)))
	}
}

// Queued returns how many connections wait for a backend slot now.
func (s *TCPService) Queued() int { return int(s.queue.n.Load()) }

// ServeQueue hands the oldest waiting connection that has room to its loop
// to pick again: a backend released a slot, or a new snapshot (a backend
// up, a reload that raised a cap) may have room. Safe from any goroutine; a
// no-op when nobody waits, and once a drain ran out of time (its reset
// of the waiting set must find them all; none is dialed then).
func (s *TCPService) ServeQueue() {
	if s.queue.n.Load() == 0 || s.ev.refuse.Load() {
		return
	}
	w, tokenIn, ok := s.queue.pop()
	if !ok {
		s.wakeAtToken(tokenIn)
		return
	}
	w.l.post(func() { s.serveWaiter(w.l, w.c, w.gen) })
}

// wakeAtToken serves the queue again in d, when a backend over its
// max_conn_rate has a token again: nothing else (no release, no publish)
// would wake the waiters then. One timer per service, armed once at a
// time; d = 0 does nothing.
func (s *TCPService) wakeAtToken(d time.Duration) {
	if d > 0 && s.queue.token.armed.CompareAndSwap(false, true) {
		s.queue.token.t.Reset(d)
	}
}

// tokenWake is a service's timer for max_conn_rate's next token: armed
// while it runs.
type tokenWake struct {
	t     *time.Timer
	armed atomic.Bool
}

// tokenDue is the token timer's end.
func (s *TCPService) tokenDue() {
	s.queue.token.armed.Store(false)
	s.ServeQueue()
}

// enqueue parks c until a backend frees a slot (or has a token again) or
// queue_timeout runs out (at once when it is 0). c keeps its max_conns
// slot; it is in the loop's waiting set, so a drain's end resets it.
func (c *evConn) enqueue(l *loop) {
	c.mustLive()
	s := c.svc
	tokenIn := c.pick.snap.RateWait()
	if tokenIn > 0 {
		s.Stats.RateWaits.Add(1)
	}
	if c.st.QueueTimeout <= 0 {
		c.waitRanOut(l)
		return
	}
	s.Stats.QueueWaits.Add(1)
	if !c.in.hold {
		c.times.queueUntil = l.now() + int64(c.st.QueueTimeout)
	} // else the hold's deadline stands
	c.park(l, 0, false)
	s.wakeAtToken(tokenIn)
}

// park puts c in the VIP's queue (at the front: a waiter that was served
// and found no room again) with a new timer generation, its next look for
// room armed.
func (c *evConn) park(l *loop, failedOn uint64, front bool) {
	c.mustLive()
	s := c.svc
	c.state = evQueued
	l.wait(c)
	c.gen = l.nextGen() // an earlier wait's or connect's timer must not fire on this one
	c.in.queue = true
	s.queue.push(waiter{l: l, c: c, gen: c.gen, store: c.store(), failedOn: failedOn}, front)
	c.armQueueTimer(l)
	// A slot freed (or a snapshot published) between the pick and the
	// push saw nobody waiting.
	if c.store().Load().Room() {
		s.ServeQueue()
	}
}

// leaveQueue takes c out of the VIP's queue, if it is in it (a no-op
// when the queue handed it out already).
func (c *evConn) leaveQueue() {
	c.mustLive()
	if c.in.queue {
		c.svc.queue.remove(c)
		c.in.queue = false
	}
}

// store is where c picks from: its SNI route's snapshots, or the VIP's.
func (c *evConn) store() *snapshot.Store {
	c.mustLive()
	if c.pick.rt != nil {
		return c.pick.rt.Snapshots
	}
	return c.svc.snaps
}

// armQueueTimer arms the next look for room, or the timeout if sooner.
func (c *evConn) armQueueTimer(l *loop) {
	c.mustLive()
	poll := cmp.Or(c.st.queuePoll, queuePoll)
	l.after(time.Duration(min(c.times.queueUntil-l.now(), int64(poll))), c, c.gen<<2|timerConnect)
}

// queueTimer: the wait ran out, or it is time to look for room.
func (c *evConn) queueTimer(l *loop) {
	c.mustLive()
	if l.now() >= c.times.queueUntil {
		c.waitRanOut(l)
		return
	}
	if c.store().Load().Room() {
		c.svc.ServeQueue() // the oldest waiter with room first, which may not be c
	}
	c.armQueueTimer(l)
}

// serveWaiter picks a backend for a waiter the queue handed out, on the
// loop that owns it. One that ended meanwhile passes the slot on; one
// that finds every backend full again goes back to the head of the queue.
func (s *TCPService) serveWaiter(l *loop, c *evConn, gen uint32) {
	if c.gen != gen || c.state != evQueued || c.svc != s {
		s.ServeQueue()
		return
	}
	if s.ev.refuse.Load() {
		return // a drain's end resets the waiting set, this one with it
	}
	c.in.queue = false
	c.pick.snap = c.store().Load() // a reload or health change since it came
	b := c.pickBackend()
	if b == nil {
		if c.pick.snap.Full(&c.pick.tried) || c.in.hold && c.pick.snap.Len() == 0 {
			c.in.queue = true
			s.queue.push(waiter{l: l, c: c, gen: gen, store: c.store()}, true) // its timers run on: same gen
			s.wakeAtToken(c.pick.snap.RateWait())
			return
		}
		c.state = evConnecting
		if c.holds() {
			c.holdFailover(l, 0)
			return
		}
		c.noBackend(l, balance.ErrNoBackend, l4.EndNoBackend)
		return
	}
	l.unwait(c)
	c.state = evConnecting
	c.gen = l.nextGen() // the wait's timer must not fire on the connect
	c.start(l, b)
	s.ServeQueue() // more room (a raised cap, a backend up): the next one

}

// waitRanOut resets a client whose wait ran out: queue_timeout for a
// backend slot (or at once, with queue_timeout 0), or failover_hold for
// an eligible backend (reset as it would have been at once without the
// hold). Counted and logged, rate-limited; no backend was dialed.
func (c *evConn) waitRanOut(l *loop) {
	c.mustLive()
	s := c.svc
	c.leaveQueue()
	if c.in.hold {
		s.Stats.HoldExpired.Add(1)
		s.rateLog("no backend became eligible within failover_hold: client reset",
			zap.Stringer("client", c.flow.Src), zap.Duration("failover_hold", c.st.FailoverHold))
		c.noBackend(l, balance.ErrNoBackend, l4.EndNoBackend)
		return
	}
	s.Stats.QueueTimeouts.Add(1)
	s.rateLog("every backend is at its max_conns: client reset after queue_timeout",
		zap.Stringer("client", c.flow.Src), zap.Duration("queue_timeout", c.st.QueueTimeout))
	c.resetClient(l, l4.EndQueueTimeout)
}
