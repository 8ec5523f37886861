// A proxied TCP connection: two directions, idle tracking and teardown.
package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// errIdle ends a connection that moved no byte for the idle timeout.
var errIdle = errors.New("idle timeout")

// tcpConn is one client connection proxied to one backend.
type tcpConn struct {
	svc     *TCPService
	client  *net.TCPConn
	backend *net.TCPConn
	target  *l4.Backend
	start   time.Time
	idle    time.Duration // 0 = no idle timeout

	lastActive atomic.Int64 // time.Since(start) at the last byte moved

	closeOnce sync.Once
}

// touch records activity. Directions call it per chunk, not per packet.
func (c *tcpConn) touch() {
	if c.idle > 0 {
		c.lastActive.Store(int64(time.Since(c.start)))
	}
}

// idleDeadline is when the connection becomes idle if nothing moves.
func (c *tcpConn) idleDeadline() time.Time {
	return c.start.Add(time.Duration(c.lastActive.Load()) + c.idle)
}

// extendRead is called when a read deadline fired: it returns errIdle if
// nothing moved in either direction for the idle timeout, else it moves
// the deadline to the idle timeout after the last activity.
func (c *tcpConn) extendRead(conn *net.TCPConn) error {
	dl := c.idleDeadline()
	if !time.Now().Before(dl) {
		return errIdle
	}
	return conn.SetReadDeadline(dl)
}

// extendWrite is extendRead for a write that has waited since the deadline.
func (c *tcpConn) extendWrite(conn *net.TCPConn) error {
	dl := c.idleDeadline()
	if !time.Now().Before(dl) {
		return errIdle
	}
	return conn.SetWriteDeadline(dl)
}

// run proxies both directions until both end, then closes both sockets.
func (c *tcpConn) run() {
	if c.idle > 0 {
		dl := c.start.Add(c.idle)
		_ = c.client.SetDeadline(dl)
		_ = c.backend.SetDeadline(dl)
	}
	up, err1 := newDirection(c, c.client, c.backend, &c.target.Stats.BytesIn)
	down, err2 := newDirection(c, c.backend, c.client, &c.target.Stats.BytesOut)
	if err := errors.Join(err1, err2); err != nil {
		c.abort(true, true)
		return
	}
	done := make(chan struct{})
	go func() {
		c.finish(down, down.run())
		close(done)
	}()
	c.finish(up, up.run())
	<-done
	c.close()
	c.svc.connEnded(c, up.moved, down.moved)
}

// finish acts on how one direction ended, at once, so that a reset or an
// idle timeout also stops the direction still waiting.
func (c *tcpConn) finish(d *direction, e end) {
	switch e {
	case endSrcErr: // src is gone: its peer learns by a reset
		c.abort(d.src == c.backend, d.src == c.client)
	case endDstErr: // dst is gone: whoever sent to it learns by a reset
		c.abort(d.src == c.client, d.src == c.backend)
	case endIdle:
		c.svc.Stats.IdleClosed.Add(1)
		c.close()
	}
}

// abort closes both sockets, sending a reset (SO_LINGER 0) on those asked.
func (c *tcpConn) abort(resetClient, resetBackend bool) {
	c.closeOnce.Do(func() {
		if resetClient {
			_ = c.client.SetLinger(0)
		}
		if resetBackend {
			_ = c.backend.SetLinger(0)
		}
		_ = c.client.Close()
		_ = c.backend.Close()
	})
}

// close closes both sockets politely (FIN).
func (c *tcpConn) close() { c.abort(false, false) }
