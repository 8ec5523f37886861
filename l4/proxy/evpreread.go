// The pre-read stages: before any backend is picked, a connection may
// wait for the client's first bytes. The stages are entries of one list,
// met in its order, each only where it applies, and share one skeleton:
// the connection joins its loop's waiting set (a drain's end resets it
// there), arms one timer (the connect timer's kind: connectTimer tells
// the states apart) and peeks (MSG_PEEK) into the loop's buffer on each
// readable edge; the bytes peeked are the stage's to judge. A client
// that takes too long is ended as its stage says. Nothing is allocated,
// and nothing is read off the socket but a PROXY header: the backend gets
// every other byte, by copy or splice, once it answers.

package proxy

import (
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/sni"
)

// evPreRead: waiting in a pre-read stage (c.stage), before any backend is
// picked (declared here, beside its code, after evconn.go's states).
const evPreRead = evHanding + 1

// preStage is an entry of the pre-read list, in the order a connection
// meets them.
type preStage uint8

const (
	// preHeader: a PROXY header from a trusted source within
	// connect_timeout (accept_proxy_protocol; evheader.go). Its source
	// becomes the flow's: the access list and per-client limits (admit)
	// check that address, after this stage and before the next.
	preHeader preStage = iota
	// preFirstByte: any byte (or a FIN) within first_byte_timeout.
	preFirstByte
	// preHello: a TLS ClientHello within sni_timeout, whose server name
	// picks the SNI route (evhello.go), or on a postgres VIP a startup
	// packet, whose database and user pick it (evstartup.go). It stands
	// for the first byte's wait on a VIP with routes.
	preHello
	// preDone: past the list, a backend is dialed.
	preDone
)

// preWait reports whether stage p applies to c, and how long the client
// may take.
func (c *evConn) preWait(p preStage) (time.Duration, bool) {
	c.mustLive()
	switch p {
	case preHeader:
		return c.st.ConnectTimeout, c.st.AcceptProxy != AcceptProxyOff
	case preFirstByte:
		return c.st.FirstByteTimeout, c.pick.routes == nil && c.st.FirstByteTimeout > 0
	case preHello:
		if c.pick.routes != nil {
			return c.pick.routes.Timeout, true
		}
	}
	return 0, false
}

// peekLen is the most bytes stage p looks at (within the loop's buffer).
func (p preStage) peekLen() int {
	switch p {
	case preHeader:
		return maxAcceptHeader
	case preHello:
		return sni.MaxPeek
	}
	return 1
}

// preRead goes through the list from stage from on: the first stage that
// applies starts and the connection waits there; past the list it dials.
// A client that is refused on the way (admit) has been reset.
func (c *evConn) preRead(l *loop, from preStage) {
	c.mustLive()
	for p := from; p < preDone; p++ {
		if p == preFirstByte && !c.admit(l) {
			return
		}
		if wait, ok := c.preWait(p); ok {
			c.awaitPre(l, p, wait)
			return
		}
	}
	c.dial(l)
}

// awaitPre starts stage p, waiting at most wait, and peeks at once: the
// bytes may be here already (defer_accept, a quick client).
func (c *evConn) awaitPre(l *loop, p preStage, wait time.Duration) {
	c.mustLive()
	if p == preHeader && !c.st.trusts(c.flow.Src.Addr()) {
		c.refuseHeader(l, errProxyUntrusted) // before a byte is read
		return
	}
	c.state, c.stage = evPreRead, p
	l.wait(c)
	c.gen = l.nextGen() // no earlier timer fires on this wait
	l.after(wait, c, c.gen<<2|timerConnect)
	c.clientSock.readable = true
	c.peekPre(l)
}

// peekPre peeks at what the client sent so far and hands it to the
// stage. A stage that has not seen enough waits for the next readable
// edge: the bytes stay queued, and new ones bring a new edge.
func (c *evConn) peekPre(l *loop) {
	c.mustLive()
	if !c.clientSock.readable {
		return
	}
	n, err := peekRetry(c.clientSock.fd, l.scratch.buf[:c.stage.peekLen()])
	switch {
	case err == unix.EAGAIN:
		c.clientSock.readable = false
		return
	case err != nil:
		c.finish(l, false, false, l4.EndClientReset)
		return
	}
	if c.preGot(l, l.scratch.buf[:n]) {
		c.clientSock.readable = false
	}
}

// preGot hands the bytes peeked (none: the client's FIN came first) to
// the stage waiting for them; more: it needs more to decide.
func (c *evConn) preGot(l *loop, p []byte) (more bool) {
	c.mustLive()
	switch c.stage {
	case preHeader:
		return c.gotHeader(l, p)
	case preHello:
		return c.gotHello(l, p)
	}
	// preFirstByte: a byte, or a FIN, which is not silence: the backend
	// learns of it as before.
	c.preReadDone(l)
	return false
}

// preReadDone ends the stage the connection waited in and goes on down
// the list.
func (c *evConn) preReadDone(l *loop) {
	c.mustLive()
	c.state = evConnecting
	c.gen = l.nextGen() // the wait's timer must not fire on what follows
	c.preRead(l, c.stage+1)
}

// preExpired ends a connection whose client did not give its stage what
// it waits for in time: counted on the VIP and logged (rate-limited); no
// backend was dialed.
func (c *evConn) preExpired(l *loop) {
	c.mustLive()
	s := c.svc
	var e preExpiry
	switch c.stage {
	case preHeader:
		c.refuseHeader(l, errProxyTimeout) // with the header's other refusals
		return
	case preFirstByte:
		// Closed with a FIN (as HAProxy's `timeout client` and nginx's
		// preread and header timeouts do by default): a slow but honest
		// client sees an orderly end rather than an error, and the socket
		// holds no unread data, so the close costs the kernel no more than
		// a reset would.
		e = preExpiry{&s.Stats.FirstByteTimeouts, "client sent nothing within first_byte_timeout: closed, no backend dialed",
			"first_byte_timeout", c.st.FirstByteTimeout, false, l4.EndFirstByte}
	case preHello:
		// Reset: unread bytes make the kernel's close a reset anyway.
		e = preExpiry{&s.Stats.SNITimeouts, "client sent no complete TLS ClientHello (or PostgreSQL startup packet) within sni_timeout: reset, no backend dialed",
			"sni_timeout", c.pick.routes.Timeout, true, l4.EndSNITimeout}
	}
	e.count.Add(1)
	if s.logs.warnings.allow() {
		s.log.Info(e.msg, zap.Stringer("client", c.flow.Src), zap.Duration(e.setting, e.wait), zap.Stringer("listen", s.key))
	}
	c.finish(l, e.reset, false, e.why)
}

// preExpiry is what a stage's timeout does.
type preExpiry struct {
	count   *atomic.Uint64 // the VIP's counter
	msg     string         // the log line
	setting string         // the setting the wait came from: the line's field
	wait    time.Duration
	reset   bool // reset the client, else close with a FIN
	why     l4.EndReason
}

// peekRetry reads what a socket holds without consuming it.
func peekRetry(fd int, p []byte) (int, error) {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), unix.MSG_PEEK, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}
