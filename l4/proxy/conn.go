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
	opened  time.Time
	idle    time.Duration // 0 = no idle timeout

	lastActive atomic.Int64 // time.Since(opened) at the last byte moved

	up, down  direction    // client to backend, backend to client
	running   atomic.Int32 // pumps still running; the last one ends the connection
	idled     atomic.Bool  // closed for idleness (either direction may notice first)
	closeOnce sync.Once
}

// touch records activity. Directions call it per chunk, not per packet.
func (c *tcpConn) touch() {
	if c.idle > 0 {
		c.lastActive.Store(int64(time.Since(c.opened)))
	}
}

// idleDeadline is when the connection becomes idle if nothing moves.
func (c *tcpConn) idleDeadline() time.Time {
	return c.opened.Add(time.Duration(c.lastActive.Load()) + c.idle)
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

// start proxies both directions on two new goroutines; the last to finish
// closes both sockets and does the connection's accounting.
func (c *tcpConn) start() {
	if c.idle > 0 {
		// Reads always wait, so they always need the idle deadline; writes
		// get theirs only if they ever have to wait (see drain).
		dl := c.opened.Add(c.idle)
		_ = c.client.SetReadDeadline(dl)
		_ = c.backend.SetReadDeadline(dl)
	}
	err1 := c.up.init(c, c.client, c.backend, &c.target.Stats.BytesIn)
	err2 := c.down.init(c, c.backend, c.client, &c.target.Stats.BytesOut)
	if errors.Join(err1, err2) != nil {
		c.abort(true, true)
		c.end()
		return
	}
	c.running.Store(2)
	go c.pump(&c.up)
	go c.pump(&c.down)
}

func (c *tcpConn) pump(d *direction) {
	c.finish(d, d.run())
	if c.running.Add(-1) == 0 {
		c.end()
	}
}

// end runs once both directions are done.
func (c *tcpConn) end() {
	c.close()
	if c.idled.Load() {
		c.svc.Stats.IdleClosed.Add(1)
	}
	c.svc.release(c.target)
	c.svc.untrack(c)
	c.svc.connDone()
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
		c.idled.Store(true)
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
