// Ending connections on purpose: a rebalance moves clients off a backend
// by closing some of its connections, gracefully (a FIN both ways) unless
// asked to reset.

package proxy

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/appframe"
)

// CloseHow says how CloseSome ends a connection.
type CloseHow uint8

const (
	// CloseFIN ends a connection in order: what each direction already
	// read is written on, then each side gets a FIN (shutdown(SHUT_WR)),
	// and the connection ends once both peers have closed too. Bytes that
	// arrive after the FIN went the other way are read and dropped (a
	// socket closed with unread bytes would send a reset). A peer that
	// has not closed closeLinger after the close began is closed on (the
	// kernel finishes the handshake; data it still sends then is reset).
	CloseFIN CloseHow = iota
	// CloseReset resets both sides at once (SO_LINGER 0), as disable does.
	CloseReset
)

func (h CloseHow) String() string {
	if h == CloseReset {
		return "reset"
	}
	return "fin"
}

// closeLinger bounds how long a connection being closed with CloseFIN
// waits for its peers (at most its idle_timeout).
const closeLinger = 10 * time.Second

// quietFor is how long a connection must have moved no byte to count as
// idle when CloseSome chooses (a pooled connection between requests).
const quietFor = time.Second

// CloseSome ends up to n of the service's open connections to b and
// returns how many it began to end. Idle connections (no byte either way
// for a second) go first, then busy ones; within each, the oldest first.
// A client that reconnects is then the youngest, so no connection is
// closed twice while an older one to the backend is left, and a client
// the balancer sends back where it was is not closed again at once.
//
// The backend's live count drops when the close begins (the flow is
// over for balancing), not when the peers have closed. The client's
// affinity pin to b, if any, is dropped, so that its next connection is
// balanced anew.
func (s *TCPService) CloseSome(b *l4.Backend, n int, how CloseHow) int {
	if n <= 0 || b == nil {
		return 0
	}
	var mu sync.Mutex
	var all []closeCandidate
	s.ev.loops.each(func(l *loop) {
		mine := s.closeCandidates(l, b, n)
		mu.Lock()
		all = append(all, mine...)
		mu.Unlock()
	})
	slices.SortFunc(all, closeOrder)
	all = all[:min(n, len(all))]
	var closed atomic.Int64
	s.ev.loops.each(func(l *loop) {
		for _, k := range all {
			// The struct may have ended and been reused since: its
			// generation says.
			if k.l == l && k.c.gen == k.gen && k.c.state == evOpen && k.c.svc == s && k.c.chosen == b {
				if how == CloseFIN && k.c.app != nil {
					k.c.askClose(l, closeAsk{why: l4.EndRebalance, code: appframe.CloseGoingAway, wait: k.c.closeWait()}) // at a boundary
				} else {
					k.c.startClose(l, how)
				}
				closed.Add(1)
			}
		}
	})
	return int(closed.Load())
}

// closeCandidate is an open connection CloseSome may end, as its loop saw
// it.
type closeCandidate struct {
	c     *evConn
	gen   uint32
	l     *loop
	busy  bool  // moved a byte within quietFor, or holds bytes
	since int64 // loop clock at its connect (the loops share one clock)
}

// closeOrder puts idle connections first, then the oldest.
func closeOrder(a, b closeCandidate) int {
	if a.busy != b.busy {
		if a.busy {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.since, b.since)
}

// closeCandidates lists, on loop l, the n connections to b that
// closeOrder puts first.
func (s *TCPService) closeCandidates(l *loop, b *l4.Backend, n int) []closeCandidate {
	var out []closeCandidate
	now := l.now()
	for c := range l.conns {
		if c.svc != s || c.chosen != b || c.state != evOpen || (c.app != nil && c.app.asked) {
			continue
		}
		if c.kernel {
			c.kernSync(l) // its last activity is the program's
		}
		busy := now-c.lastActive() < int64(quietFor) || c.up.pending > 0 || c.down.pending > 0 ||
			(c.app != nil && !c.app.t.Idle()) // mid-transaction or mid-frame: its close would wait
		out = append(out, closeCandidate{c: c, gen: c.gen, l: l, busy: busy, since: c.times.dialAt})
	}
	if len(out) > n {
		slices.SortFunc(out, closeOrder)
		out = out[:n]
	}
	return out
}

// startClose begins ending an open connection.
func (c *evConn) startClose(l *loop, how CloseHow) {
	c.mustLive()
	s := c.svc
	if a := s.affinity.Load(); a != nil {
		if pinned, ok := a.Get(s.key, c.flow.Src.Addr()); ok && pinned == c.chosen {
			a.Delete(s.key, c.flow.Src.Addr())
		}
	}
	if how == CloseReset {
		c.finish(l, true, true, l4.EndRebalance)
		return
	}
	if c.app == nil || !c.app.released {
		s.release(c.chosen)
	}
	c.state = evClosing
	l.after(c.closeWait(), c, c.gen<<2|timerLinger)
	if c.kernel {
		c.kernFlush(l)
		return
	}
	c.pumpClosing(l)
}

// closeWait is how long a closing connection waits for its peers, and
// an asked one for a boundary: closeLinger, at most its idle_timeout.
func (c *evConn) closeWait() time.Duration {
	c.mustLive()
	wait := closeLinger
	if c.times.idle > 0 && time.Duration(c.times.idle) < wait {
		wait = time.Duration(c.times.idle)
	}
	return wait
}

// pumpClosing moves a closing connection on: pending bytes and FINs out,
// late bytes in and dropped; it ends once both peers have closed.
func (c *evConn) pumpClosing(l *loop) {
	c.mustLive()
	more := c.closeDir(l, &c.up)
	if c.state == evClosing && c.closeDir(l, &c.down) {
		more = true
	}
	switch {
	case c.state != evClosing:
	case c.up.done && c.down.done && c.up.eof && c.down.eof:
		c.finish(l, false, false, l4.EndRebalance)
	case more && !c.queued:
		c.queued = true
		l.again = append(l.again, againEntry{t: c, gen: c.gen})
	}
}

// closeDir flushes what direction d holds, then sends its destination a
// FIN, then drops what its source still sends until the source's FIN. It
// returns true when the turn ended with more to read.
func (c *evConn) closeDir(l *loop, d *evDir) bool {
	c.mustLive()
	if !d.done {
		if d.pending > 0 && (!d.dst.writable || !c.writePending(l, d)) {
			return false
		}
		if err := shutdownWrite(d.dst.fd); err != nil {
			c.dstFailed(l, d, err)
			return false
		}
		d.done = true
	}
	return c.dropFrom(l, d)
}

// dropFrom reads and drops what d's source sends after the FIN went the
// other way, up to the source's own FIN, so that closing the socket later
// sends no reset. It returns true when the turn ended with more to read.
func (c *evConn) dropFrom(l *loop, d *evDir) bool {
	c.mustLive()
	for range spliceRounds {
		if d.eof || !d.src.readable {
			return false
		}
		n, err := readRetry(d.src.fd, l.scratch.buf)
		switch {
		case err == unix.EAGAIN:
			d.src.readable = false
			return false
		case err != nil:
			c.srcFailed(l, d, err)
			return false
		case n == 0:
			d.eof = true
			return false
		case n < len(l.scratch.buf):
			if d.src.rdhup {
				d.eof = true // drained, and the FIN is all that follows
			} else {
				d.src.readable = false
			}
			return false
		}
	}
	return true
}

// lingerEnd closes a connection whose peers did not both close within
// closeLinger: it drops what is readable now, then closes (FIN, already
// sent, so nothing new goes out).
func (c *evConn) lingerEnd(l *loop) {
	c.mustLive()
	if c.state != evClosing {
		return
	}
	for _, d := range [2]*evDir{&c.up, &c.down} {
		if c.state == evClosing {
			c.dropFrom(l, d) // may end it (a reset)
		}
	}
	if c.state == evClosing {
		c.finish(l, false, false, l4.EndRebalance)
	}
}
