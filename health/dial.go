// dial.go: the timed non-blocking connect and the polite close every checker shares.

package health

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/proxyhdr"
)

// closeGrace bounds how long a polite close waits for the server's FIN
// after the verdict. Servers close within an RTT of ours; one that does not
// is not worth holding the probe for.
const closeGrace = 250 * time.Millisecond

// drainLimit bounds what a polite close reads and discards.
const drainLimit = 64 << 10

// connOpts are what every connection of a checker shares: the check's
// time budget and the PROXY header it starts with.
type connOpts struct {
	timeout time.Duration
	proxy   l4.ProxyVersion // PROXY header written first; ProxyOff = none
	route   l4.ProbeRoute   // the data plane's route to the backend; zero = its own address
}

// optsOf takes a checker's connOpts from its spec (defaults applied).
func optsOf(s Spec) connOpts {
	return connOpts{timeout: s.Timeout, proxy: s.ProxyHeader, route: s.Route}
}

// dialTimed connects to addr (through route when it is not zero) within
// ctx and writes the PROXY header of version proxy (0: none). It returns
// the handshake time (kernel RTT when available) and whether it came from
// the kernel.
func dialTimed(ctx context.Context, addr netip.AddrPort, proxy l4.ProxyVersion, route l4.ProbeRoute) (*net.TCPConn, time.Duration, bool, error) {
	d := net.Dialer{KeepAlive: -1} // probes are short; skip the keepalive setsockopts
	if !route.IsZero() {
		addr = routed(&d, addr, route)
	}
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()).String())
	wall := time.Since(start)
	if err != nil {
		return nil, 0, false, err
	}
	tc := c.(*net.TCPConn)
	rtt, kernel := kernelRTT(tc)
	if !kernel {
		rtt = wall
	}
	if proxy != l4.ProxyOff {
		if err := writeProxyHeader(ctx, tc, proxy); err != nil {
			tc.Close()
			return nil, 0, false, err
		}
	}
	return tc, rtt, kernel, nil
}

// writeProxyHeader sends c's PROXY header: the probe's own addresses as
// the client's, the backend's as the destination (what a backend behind
// the proxy sees for a client on the balancer's host).
func writeProxyHeader(ctx context.Context, c *net.TCPConn, version l4.ProxyVersion) error {
	var buf [proxyhdr.MaxLen]byte
	src, dst := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
		defer c.SetWriteDeadline(time.Time{})
	}
	if _, err := c.Write(proxyhdr.Append(buf[:0], int(version), src, dst)); err != nil {
		return fmt.Errorf("sending PROXY header: %w", err)
	}
	return nil
}

// dial connects for the probe, records the handshake time and ties the
// socket's deadline to the probe's context, so that every later read and
// write ends at the timeout or on cancel.
func (p *probe) dial(addr netip.AddrPort) (*net.TCPConn, error) {
	c, rtt, kernel, err := dialTimed(p.ctx, addr, p.proxy, p.route)
	if err != nil {
		return nil, err
	}
	p.res.Connect, p.res.KernelRTT = rtt, kernel
	if dl, ok := p.ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(p.ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	p.stops = append(p.stops, stop)
	return c, nil
}

// closePolitely ends c with a FIN, never an RST. Closing a socket that
// still holds unread bytes makes the kernel send an RST, which servers log
// as "connection reset"; so it half-closes (unless the server was asked
// to close first), reads and discards what the server still sends until
// the server closes too (bounded by the probe's deadline and closeGrace),
// then closes. Bytes that arrive after that (a body beyond drainLimit, a
// server that neither closes nor goes quiet) still draw an RST.
func (p *probe) closePolitely(c *net.TCPConn) {
	for _, stop := range p.stops {
		stop() // the deadline below must not be overwritten by a cancel
	}
	p.stops = nil
	if !p.serverCloses {
		_ = c.CloseWrite()
	}
	wait := closeGrace
	if dl, ok := p.ctx.Deadline(); ok && time.Until(dl) < wait {
		wait = time.Until(dl)
	}
	if wait > 0 && p.ctx.Err() == nil {
		_ = c.SetReadDeadline(time.Now().Add(wait))
		_, _ = io.Copy(io.Discard, io.LimitReader(onlyReader{c}, drainLimit))
	}
	_ = c.Close()
}

// onlyReader hides TCPConn's WriterTo so io.Copy does plain reads.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(b []byte) (int, error) { return o.r.Read(b) }

// firstByte wraps a reader and notes when the first bytes arrived.
type firstByte struct {
	r    io.Reader
	from time.Time // when the request was sent
	got  time.Duration
}

func (f *firstByte) Read(b []byte) (int, error) {
	n, err := f.r.Read(b)
	if n > 0 && f.got == 0 {
		f.got = time.Since(f.from)
		if f.got <= 0 {
			f.got = 1 // zero means "no reply"
		}
	}
	return n, err
}

// sent marks the request as written and returns a reader that times the reply.
func (p *probe) sent(c net.Conn) *firstByte {
	return &firstByte{r: c, from: time.Now()}
}

// replied copies the first-byte time into the result.
func (p *probe) replied(f *firstByte) { p.res.FirstByte = f.got }
