// The state before a backend is picked on a VIP that accepts PROXY
// headers: the client (another balancer) must send one, from a trusted
// source, within connect_timeout; its source address becomes the flow's.

package proxy

import (
	"net/netip"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
)

// trusts reports whether a connection from a may send a PROXY header.
func (st *Settings) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range st.AcceptProxyFrom {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// awaitHeader starts waiting for the client's header, or refuses a
// client that may not send one.
func (c *evConn) awaitHeader(l *loop) {
	c.mustLive()
	if !c.st.trusts(c.flow.Src.Addr()) {
		c.refuseHeader(l, errProxyUntrusted)
		return
	}
	c.state = evHeader
	l.wait(c)
	l.after(c.st.ConnectTimeout, c, c.gen<<2|timerConnect)
	c.clientSock.readable = true // the header may be here already (defer_accept, a quick client)
	c.readHeader(l)
}

// readHeader peeks at what the client sent and, once it holds a whole
// header, consumes exactly the header: bytes after it stay in the socket
// and are forwarded, by copy or splice, once the backend answers. A
// header cut in pieces is peeked again as each piece arrives (at most
// maxAcceptHeader bytes, into the loop's buffer).
func (c *evConn) readHeader(l *loop) {
	c.mustLive()
	if !c.clientSock.readable {
		return
	}
	n, err := peekRetry(c.clientSock.fd, l.buf[:maxAcceptHeader])
	switch {
	case err == unix.EAGAIN:
		c.clientSock.readable = false
		return
	case err != nil:
		c.finish(l, false, false, l4.EndClientReset)
		return
	case n == 0:
		c.refuseHeader(l, errProxyTruncated)
		return
	}
	hn, src, err := parseProxyHeader(l.buf[:n], c.st.AcceptProxy)
	switch {
	case err != nil:
		c.refuseHeader(l, err)
		return
	case hn == 0 && (c.clientSock.rdhup || n == maxAcceptHeader):
		c.refuseHeader(l, errProxyTruncated) // nothing more will come
		return
	case hn == 0:
		c.clientSock.readable = false // the next piece brings a new edge
		return
	}
	if k, err := readRetry(c.clientSock.fd, l.buf[:hn]); err != nil || k != hn {
		c.finish(l, false, false, l4.EndClientReset)
		return
	}
	if src.IsValid() {
		c.flow.Src = src
	}
	c.state = evConnecting
	c.gen = l.nextGen() // the header's timer must not fire on the connect
	c.admit(l)
}

// refuseHeader resets a client whose header is refused (err says why),
// counts it on the VIP and logs it, rate-limited. Nothing was forwarded.
func (c *evConn) refuseHeader(l *loop, err error) {
	c.mustLive()
	s := c.svc
	why := l4.EndProxyMalformed
	switch err {
	case errProxyUntrusted:
		s.Stats.ProxyUntrusted.Add(1)
		why = l4.EndProxyUntrusted
	case errProxyTimeout:
		s.Stats.ProxyTimeouts.Add(1)
		why = l4.EndProxyTimeout
	default:
		s.Stats.ProxyMalformed.Add(1)
	}
	if s.warnings.allow() { // a flood of refusals costs nothing more
		s.log.Warn("PROXY header refused: client reset", zap.Stringer("client", c.flow.Src), zap.Error(err), zap.Stringer("listen", s.key))
	}
	c.finish(l, true, false, why)
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
