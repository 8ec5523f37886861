// tcp.go: the tcp check: a timed handshake and a polite close, zero bytes sent.

package health

import (
	"context"
	"net"
	"net/netip"
)

// tcpChecker passes when the handshake completes. It sends nothing, so a
// PostgreSQL server logs nothing for it; it closes with a FIN and, for
// servers that speak first (MySQL), reads and discards their greeting so
// the close is not an RST.
type tcpChecker struct {
	connOpts
}

func (ch *tcpChecker) Check(ctx context.Context, addr netip.AddrPort) Result {
	return overConn(ctx, ch.connOpts, addr, func(p *probe, _ net.Conn) { p.pass() })
}
