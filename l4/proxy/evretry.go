// Retry on an early reset (retry_on_reset): a backend that accepted a
// connection and then reset or closed it before sending a byte is
// retried on another backend, when l4lb can tell that nothing is lost.
//
// What l4lb knows at that moment decides. With "unsent", nothing the
// client sent was written to the backend's socket (bytes read from the
// client whose write failed are kept as the direction's pending bytes):
// nothing reached the backend's application, so a retry repeats nothing.
// Client bytes still in the client's socket (pre-reads only peek: SNI,
// a PostgreSQL startup packet) are read for the next backend as for the
// first. The PROXY header l4lb sends is its own and written again to the
// next backend; one a client sent was consumed before any backend.
//
// With "unanswered", client bytes may have been written: l4lb keeps a
// copy of every client byte it read (at most replayMax, in the loop's
// replay table, no allocation per connection once warm) until the
// backend's first byte, and writes them again to the next backend. The
// backend that reset may have read them (a server that crashed before
// answering): the operator opts in for protocols whose opening may be
// repeated. While a copy is kept the client direction moves by copy, not
// splice (it is the opening exchange: small).

package proxy

import (
	"errors"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
)

// replayMax is the most client bytes retry_on_reset = "unanswered" keeps
// for a resend; a client that sends more before its backend answers is
// not retried.
const replayMax = 16 << 10

// maxFreeReplays bounds a loop's free list of replay buffers.
const maxFreeReplays = 256

// errEarlyReset is the passive mark of a backend that accepted and then
// reset or closed before sending a byte.
var errEarlyReset = errors.New("backend reset or closed the connection before sending a byte")

// replayTable holds the client bytes of a loop's connections whose
// backend has not answered yet (retry_on_reset = "unanswered"). Owned by
// the loop's thread.
type replayTable struct {
	bufs map[*evConn]*[]byte
	free []*[]byte
}

// start gives c an empty replay buffer.
func (t *replayTable) start(c *evConn) {
	if t.bufs == nil {
		t.bufs = map[*evConn]*[]byte{}
	}
	var b *[]byte
	if n := len(t.free); n > 0 {
		b, t.free = t.free[n-1], t.free[:n-1]
	} else {
		s := make([]byte, 0, replayMax)
		b = &s
	}
	*b = (*b)[:0]
	t.bufs[c] = b
}

// end takes c's buffer back.
func (t *replayTable) end(c *evConn) {
	b, ok := t.bufs[c]
	if !ok {
		return
	}
	delete(t.bufs, c)
	if len(t.free) < maxFreeReplays {
		t.free = append(t.free, b)
	}
}

// startReplay begins keeping the client's bytes, on a VIP with
// retry_on_reset = "unanswered" (the first open only).
func (c *evConn) startReplay(l *loop) {
	c.mustLive()
	if c.st.RetryOnReset != l4.RetryResetUnanswered || c.pick.replaying || c.pick.early > 0 {
		return
	}
	l.replays.start(c)
	c.pick.replaying = true
}

// endReplay stops keeping the client's bytes: the backend answered, the
// client sent more than replayMax, or the connection ends.
func (c *evConn) endReplay(l *loop) {
	c.mustLive()
	if !c.pick.replaying {
		return
	}
	c.pick.replaying = false
	l.replays.end(c)
}

// record keeps bytes read from the client for a resend.
func (c *evConn) record(l *loop, p []byte) {
	c.mustLive()
	b := l.replays.bufs[c]
	if b == nil || len(*b)+len(p) > replayMax {
		c.endReplay(l) // too much to keep: no retry once any of it is written
		return
	}
	*b = append(*b, p...)
}

// resend puts the kept client bytes before anything else the next
// backend gets (open, after a retry).
func (c *evConn) resend(l *loop) {
	c.mustLive()
	if b := l.replays.bufs[c]; b != nil && len(*b) > 0 {
		c.hold(l, &c.up, *b)
	}
}

// earlyRetry retries the connection on another backend when its backend
// reset or closed before sending a byte and nothing is lost by it (see
// the file comment); it reports whether it did. Called as the backend's
// side fails, before anything else of the failure happens.
func (c *evConn) earlyRetry(l *loop) bool {
	c.mustLive()
	switch {
	case c.st.RetryOnReset == l4.RetryResetOff, c.state != evOpen, c.chosen == nil:
		return false
	case c.kernel: // the kernel moves its bytes: c.up and c.down do not see them
		return false
	case c.down.n > 0 || c.down.pending > 0 || c.down.eof: // the backend sent something
		return false
	case c.up.eof: // the client closed its side: the backend's close may answer it
		return false
	case c.up.n > 0 && !c.pick.replaying: // written, and no copy kept
		return false
	case c.app != nil && c.app.asked: // a close was asked of it
		return false
	case int(c.pick.attempts) > c.st.Retries: // no try left: the client learns as before
		return false
	}
	s, b := c.svc, c.chosen
	s.Stats.EarlyResetRetries.Add(1)
	b.Stats.ConnectFails.Add(1)
	if o := c.observer(); o != nil {
		o.ConnectFailed(b, errEarlyReset)
	}
	if ce := s.log.Check(zap.DebugLevel, "backend reset before its first byte: retrying on another backend"); ce != nil {
		ce.Write(zap.String("vip", c.st.Name), zap.Stringer("client", c.flow.Src), zap.String("backend", string(b.ID)),
			zap.Uint64("client_bytes_written", c.up.n))
	}
	c.closeSock(l, &c.backendSock, true)
	c.backendSock = sock{reg: reg{fd: -1, slot: -1}}
	if c.pick.replaying || c.up.pending == 0 {
		// The kept copy is resent whole; or nothing waits.
		if c.up.pipe != nil {
			l.pipes.pool.discard(c.up.pipe)
		}
		c.up.pipe, c.up.held, c.up.pending = nil, nil, 0
	}
	c.putPipe(l, &c.down)
	l.putApp(c)
	if c.in.conns {
		s.untrackEv(l, c)
	}
	s.release(b)
	c.chosen = nil
	c.pick.lastFail = l4.EndBackendReset
	c.pick.early++
	c.fin = l4.EndNone
	c.gen = l.nextGen() // the old attempt's timers must not fire on the next
	c.state = evConnecting
	c.dial(l)
	return true
}
