// The PROXY header's pre-read stage (evpreread.go), on a VIP that
// accepts PROXY headers: the client (another balancer) must send one,
// from a trusted source, within connect_timeout; its source address
// becomes the flow's.

package proxy

import (
	"net/netip"

	"go.uber.org/zap"

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

// gotHeader judges what the client sent so far (the pre-read stage
// preHeader) and, once it holds a whole header, consumes exactly the
// header: bytes after it stay in the socket and are forwarded, by copy or
// splice, once the backend answers. A header cut in pieces is peeked
// again as each piece arrives (more), up to maxAcceptHeader bytes.
func (c *evConn) gotHeader(l *loop, p []byte) (more bool) {
	c.mustLive()
	if len(p) == 0 {
		c.refuseHeader(l, errProxyTruncated)
		return false
	}
	hn, src, err := parseProxyHeader(p, c.st.AcceptProxy)
	switch {
	case err != nil:
		c.refuseHeader(l, err)
		return false
	case hn == 0 && (c.clientSock.rdhup || len(p) == maxAcceptHeader):
		c.refuseHeader(l, errProxyTruncated) // nothing more will come
		return false
	case hn == 0:
		return true // the next piece brings a new edge
	}
	if k, err := readRetry(c.clientSock.fd, l.scratch.buf[:hn]); err != nil || k != hn {
		c.finish(l, false, false, l4.EndClientReset)
		return false
	}
	if src.IsValid() {
		c.flow.Src = src
	}
	c.preReadDone(l)
	return false
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
	if s.logs.warnings.allow() { // a flood of refusals costs nothing more
		s.log.Warn("PROXY header refused: client reset", zap.Stringer("client", c.flow.Src), zap.Error(err), zap.Stringer("listen", s.key))
	}
	c.finish(l, true, false, why)
}
