// The state before a backend is picked on a VIP with first_byte_timeout:
// a client that connects and sends nothing within it is closed, and no
// backend connection is ever made for it.

package proxy

import (
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
)

// evFirstByte: waiting for the client's first byte, before any backend is
// picked (declared here, beside its code, after evconn.go's states).
const evFirstByte = evHanding + 1

// awaitFirstByte goes on with an admitted client: straight to a backend,
// or first a wait for the client's first byte. The wait arms one timer on the loop's heap (the connect timer's
// kind: connectTimer tells the states apart) and allocates nothing.
func (c *evConn) awaitFirstByte(l *loop) {
	c.mustLive()
	if c.pick.routes != nil { // the ClientHello's wait stands for the first byte's
		c.awaitHello(l)
		return
	}
	if c.st.FirstByteTimeout <= 0 {
		c.dial(l)
		return
	}
	c.state = evFirstByte
	l.wait(c)
	c.gen = l.nextGen() // a PROXY header's timer must not fire on this wait
	l.after(c.st.FirstByteTimeout, c, c.gen<<2|timerConnect)
	c.clientSock.readable = true // the byte may be here already (defer_accept, a quick client)
	c.readFirst(l)
}

// readFirst peeks for the client's first byte; once one (or a FIN) is
// there, the backend is dialed and the byte forwarded as any other. A FIN
// with no byte is not silence: the backend learns of it as before.
func (c *evConn) readFirst(l *loop) {
	c.mustLive()
	if !c.clientSock.readable {
		return
	}
	_, err := peekRetry(c.clientSock.fd, l.buf[:1])
	switch {
	case err == unix.EAGAIN:
		c.clientSock.readable = false
		return
	case err != nil:
		c.finish(l, false, false, l4.EndClientReset)
		return
	}
	c.state = evConnecting
	c.gen = l.nextGen() // the wait's timer must not fire on the connect
	c.dial(l)
}

// firstByteTimeout closes a client that sent nothing in time, with a FIN
// (as HAProxy's `timeout client` and nginx's preread and header timeouts
// do by default): a slow but honest client sees an orderly end rather
// than an error, and the socket holds no unread data, so the close costs
// the kernel no more than a reset would. Counted and logged, rate-limited.
func (c *evConn) firstByteTimeout(l *loop) {
	c.mustLive()
	s := c.svc
	s.Stats.FirstByteTimeouts.Add(1)
	if s.warnings.allow() {
		s.log.Info("client sent nothing within first_byte_timeout: closed, no backend dialed",
			zap.Stringer("client", c.flow.Src), zap.Duration("first_byte_timeout", c.st.FirstByteTimeout), zap.Stringer("listen", s.key))
	}
	c.finish(l, false, false, l4.EndFirstByte)
}
