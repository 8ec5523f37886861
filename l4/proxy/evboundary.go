// Closing at a boundary of the application protocol (app_protocol): a
// connection of a postgres, mysql or websocket VIP follows its server's
// stream with an appframe.Tracker, and a close asked of it (a rebalance,
// a drain, on_down = "graceful", shutdown) waits for the session to stand
// idle at a boundary; a WebSocket client is told goodbye with a Close
// frame first.

package proxy

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/appframe"
)

// wsGrace bounds how long a WebSocket client told goodbye has to answer
// with its Close (and FIN) before l4lb closes both sides.
const wsGrace = 5 * time.Second

// appConn is a connection's application-protocol state: its server
// stream's tracker and what was asked of it. A loop keeps them for reuse
// (no allocation per connection once warm, none per chunk).
type appConn struct {
	t     appframe.Tracker
	upAt  uint64 // client bytes read when the last idle message came
	idles uint32 // the tracker's idle messages when it was last looked at
	// answered: the last idle message came after client bytes (it
	// answered a request); the first one (the startup's end) does not.
	answered bool
	lostSeen bool // the lost framing was counted
	ask      closeAsk
	asked    bool   // a close is asked
	released bool   // its live flow was released when the close was asked
	bye      bool   // WebSocket: the Close frame went out; server bytes are dropped since
	byeUp    uint64 // client bytes read when the Close frame went out
	until    int64  // loop clock: give up waiting for a boundary then (0 = a drain's deadline decides)
}

// closeAsk is a close asked of a connection: why (its end's reason), the
// WebSocket code told, and how long it may wait for a boundary (0: until
// the drain's deadline resets it).
type closeAsk struct {
	why  l4.EndReason
	code uint16
	wait time.Duration
}

// appProto is the tracker's protocol for an app_protocol.
func appProto(a l4.AppProtocol) appframe.Proto {
	switch a {
	case l4.AppPostgres:
		return appframe.Postgres
	case l4.AppMySQL:
		return appframe.MySQL
	case l4.AppWebSocket:
		return appframe.WebSocket
	}
	return appframe.None
}

// startApp gives an opening connection of an app_protocol VIP its
// tracker: the server's bytes go by copy from now on (d.track), so that
// the tracker sees them. A drain or shutdown under way asks it at once.
func (c *evConn) startApp(l *loop) {
	c.mustLive()
	a := l.getApp()
	a.t.Reset(appProto(c.st.AppProtocol))
	c.app = a
	c.down.track = true
	if g := c.svc.ev.goodbye.Load(); g != 0 {
		c.askClose(l, drainAsk(uint16(g)))
	}
}

// drainAsk is what a drain asks: close at a boundary, the drain's
// deadline resets the rest.
func drainAsk(code uint16) closeAsk {
	return closeAsk{why: l4.EndDrain, code: code}
}

// followServer follows the n bytes just read from the server into buf
// and returns how many of buf to write to the client: all of them; none
// once the client was told goodbye; or, at the boundary where a goodbye
// is due, the bytes up to it and the Close frame put after them (buf
// has room for it past n).
func (c *evConn) followServer(l *loop, buf []byte, n int) int {
	c.mustLive()
	a := c.app
	switch {
	case a.bye:
		c.down.at = l.now() // the server answered (the stall watch's view), dropped
		return 0
	case a.t.Lost():
	case a.asked && c.st.AppProtocol == l4.AppWebSocket:
		k, at := a.t.FeedToBoundary(buf[:n])
		if at {
			c.wsBye(l)
			return len(appframe.CloseFrame(buf[:k], a.ask.code))
		}
	default:
		a.t.Feed(buf[:n])
		c.noteIdle()
	}
	if a.t.Lost() && !a.lostSeen {
		c.lostFraming()
	}
	return n
}

// lostFraming counts a connection whose framing was lost (or went TLS)
// and lets its server's bytes splice again: nothing more is read.
func (c *evConn) lostFraming() {
	c.mustLive()
	c.app.lostSeen = true
	c.svc.Stats.FramingLost.Add(1)
	if !c.app.bye {
		c.down.track = false
	}
}

// noteIdle notes a new idle message: the client bytes read by then, and
// whether any came since the one before (a request it answered).
func (c *evConn) noteIdle() {
	c.mustLive()
	a := c.app
	if n := a.t.Idles(); n != a.idles {
		up := c.up.n + uint64(c.up.pending)
		a.answered = a.idles > 0 && up != a.upAt
		a.idles, a.upAt = n, up
	}
}

// askClose asks an open connection of an app_protocol VIP to close at
// its next boundary; false if it was asked already. Its live flow ends
// now (the flow is over for balancing, as with CloseSome).
func (c *evConn) askClose(l *loop, k closeAsk) bool {
	c.mustLive()
	a := c.app
	if a.asked || c.state != evOpen {
		return false
	}
	a.asked, a.ask = true, k
	if !a.released {
		a.released = true
		c.svc.release(c.chosen)
	}
	if k.wait > 0 {
		a.until = l.now() + int64(k.wait)
	}
	c.armApp(l)
	c.appCheck(l)
	return true
}

// armApp arms the next look at an asked connection: the quiet of an
// unanswered idle boundary, or its wait's end.
func (c *evConn) armApp(l *loop) {
	c.mustLive()
	wait := quietFor
	if a := c.app; a.until > 0 {
		wait = min(wait, time.Duration(max(a.until-l.now(), int64(time.Millisecond))))
	}
	l.after(wait, c, c.gen<<2|timerLinger)
}

// appTimer: an asked connection's look (timerLinger while it is open).
func (c *evConn) appTimer(l *loop) {
	c.mustLive()
	a := c.app
	if a == nil || !a.asked {
		return
	}
	if a.until > 0 && l.now() >= a.until {
		if a.bye {
			c.startClose(l, CloseFIN) // the client's grace is over
			return
		}
		c.fallBack(l)
		return
	}
	c.appCheck(l)
	if c.state == evOpen {
		c.armApp(l)
	}
}

// appCheck closes an asked connection if it stands at a boundary now:
// after each pump, at the ask and at its timer.
func (c *evConn) appCheck(l *loop) {
	c.mustLive()
	a := c.app
	switch {
	case a.bye:
		up := c.up.n + uint64(c.up.pending)
		if c.up.eof || (up != a.byeUp && c.up.pending == 0 && !c.clientSock.readable) {
			c.startClose(l, CloseFIN) // the client answered (its Close) or left
		}
	case a.t.Lost():
		if a.until > 0 {
			c.fallBack(l)
		} // else the drain's deadline ends it, counted there
	case c.st.AppProtocol == l4.AppWebSocket:
		if a.t.Idle() && !a.t.ServerClosed() {
			c.sendBye(l)
		}
	case c.idleAtBoundary(l):
		c.svc.Stats.BoundaryCloses.Add(1)
		c.startClose(l, CloseFIN)
	}
}

// idleAtBoundary reports whether the session stands idle at a boundary:
// the server's last message said so, nothing more is known to wait from
// either side, no client byte came since, and the message answered a
// request or the session has been quiet for quietFor (a client that has
// just connected is about to send its first one).
func (c *evConn) idleAtBoundary(l *loop) bool {
	c.mustLive()
	a := c.app
	if !a.t.Idle() || c.up.pending > 0 || c.clientSock.readable || c.backendSock.readable {
		return false
	}
	if c.up.n != a.upAt {
		return false
	}
	return a.answered || l.now()-c.lastActive() >= int64(quietFor)
}

// fallBack ends an asked connection that will not reach a boundary in
// time (or whose framing is lost) as a close did before: FIN both ways.
func (c *evConn) fallBack(l *loop) {
	c.mustLive()
	c.svc.Stats.BoundaryFallbacks.Add(1)
	c.startClose(l, CloseFIN)
}

// sendBye tells a WebSocket client goodbye now, the server's stream
// standing between two frames: the Close frame goes after the bytes the
// client has not taken yet.
func (c *evConn) sendBye(l *loop) {
	c.mustLive()
	var f [appframe.CloseFrameLen]byte
	if !c.sendDown(l, appframe.CloseFrame(f[:0], c.app.ask.code)) {
		return // the connection failed or the frame could not be queued (fallBack ran)
	}
	c.wsBye(l)
}

// wsBye notes that the Close frame went out: server bytes are dropped
// from now on, and the client has wsGrace to answer.
func (c *evConn) wsBye(l *loop) {
	c.mustLive()
	a := c.app
	a.bye = true
	a.byeUp = c.up.n + uint64(c.up.pending)
	a.until = l.now() + int64(min(wsGrace, closeLinger))
	c.svc.Stats.BoundaryCloses.Add(1)
	c.armApp(l)
}

// sendDown writes b to the client after what the down direction holds;
// false if the connection ended or b could not be queued (the connection
// then falls back).
func (c *evConn) sendDown(l *loop, b []byte) bool {
	c.mustLive()
	d := &c.down
	if d.pending > 0 {
		if d.pipe != nil {
			if k, err := writeRetry(d.pipe.w, b); err != nil || k != len(b) {
				c.fallBack(l) // a full pipe: never seen with a 4-byte frame
				return false
			}
		} else {
			d.held = append(d.held, b...)
		}
		d.pending += len(b)
		return true
	}
	w := 0
	if d.dst.writable {
		var err error
		w, err = writeRetry(d.dst.fd, b)
		if err == unix.EAGAIN {
			w, err = 0, nil
			d.dst.writable = false
			l.watchStalls()
		}
		if err != nil {
			c.dstFailed(l, d, err)
			return false
		}
		c.moved(l, d, w)
	}
	if w < len(b) {
		c.hold(l, d, b[w:])
	}
	return true
}

// SayGoodbye asks every established connection of an app_protocol VIP to
// close at its next boundary (WebSocket: with a Close frame, code 1012
// service restart when restart, else 1001 going away), and every
// connection that opens from now on as it opens; the drain that follows
// resets what is left at its deadline. It returns how many it asked; a
// VIP without app_protocol is left as it is.
func (s *TCPService) SayGoodbye(restart bool) int {
	if s.settings.Load().AppProtocol == l4.AppNone {
		return 0
	}
	code := appframe.CloseGoingAway
	if restart {
		code = appframe.CloseServiceRestart
	}
	s.ev.goodbye.CompareAndSwap(0, uint32(code))
	code = uint16(s.ev.goodbye.Load())
	var n atomic.Int64
	s.ev.loops.each(func(l *loop) {
		for c := range l.conns {
			if c.svc == s && c.app != nil && c.askClose(l, drainAsk(code)) {
				n.Add(1)
			}
		}
	})
	return int(n.Load())
}

// getApp hands out an appConn from the loop's free list.
func (l *loop) getApp() *appConn {
	if n := len(l.free.apps); n > 0 {
		a := l.free.apps[n-1]
		l.free.apps = l.free.apps[:n-1]
		return a
	}
	return new(appConn)
}

// putApp takes a connection's appConn back.
func (l *loop) putApp(c *evConn) {
	if c.app == nil {
		return
	}
	if len(l.free.apps) < maxFreeConns {
		*c.app = appConn{}
		l.free.apps = append(l.free.apps, c.app)
	}
	c.app = nil
}
