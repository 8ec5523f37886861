// result.go: the outcome of one check and the error-to-reason wording shared by all checkers.

package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Result is the outcome of one check.
type Result struct {
	OK bool
	// Reason says why the check failed ("connect refused", "timeout after
	// 1s waiting for greeting", "unexpected status 503"); empty when OK.
	Reason string
	// Start is when the check began.
	Start time.Time
	// Connect is the TCP handshake time: the kernel's SYN to SYN-ACK RTT
	// (TCP_INFO tcpi_rtt) when it has a sample, else the wall time of the
	// connect. Zero when no connection was made.
	Connect time.Duration
	// KernelRTT tells that Connect came from TCP_INFO, not the wall clock.
	KernelRTT bool
	// FirstByte is the time from sending the request (or, for protocols
	// where the server speaks first, from the connect) to the first reply
	// byte. Zero for the tcp check and when no reply came.
	FirstByte time.Duration
	// Took is the whole check, polite close included.
	Took time.Duration
	// Lag is the replication lag a postgres or mysql check with role
	// replica read (zero: not read).
	Lag ReplicaLag
}

// probe is one check in progress: its deadline, timing and result.
type probe struct {
	ctx    context.Context
	cancel context.CancelFunc
	budget time.Duration   // the timeout in force, for reasons
	proxy  l4.ProxyVersion // PROXY header written first on every connection; ProxyOff = none
	stops  []func() bool   // undo the context-to-deadline links of dial
	// serverCloses is set once the request makes the server close (QUIT,
	// Connection: close, a WebSocket Close): then the probe waits for the
	// server's FIN before sending its own, and the server keeps the
	// TIME_WAIT.
	serverCloses bool
	res          Result
}

// begin starts a check bounded by timeout (and by ctx's own deadline).
// overConn runs one check over a fresh connection: dial (a failure is the
// result), let judge talk and decide, then close politely.
func overConn(ctx context.Context, o connOpts, addr netip.AddrPort, judge func(*probe, net.Conn)) Result {
	p := begin(ctx, o)
	c, err := p.dial(addr)
	if err != nil {
		p.failErr(err, "connecting")
		return p.end(nil)
	}
	judge(p, c)
	return p.end(c)
}

func begin(ctx context.Context, o connOpts) *probe {
	p := &probe{res: Result{Start: time.Now()}, budget: o.timeout, proxy: o.proxy}
	p.ctx, p.cancel = context.WithTimeout(ctx, o.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Sub(p.res.Start) < o.timeout {
		p.budget = dl.Sub(p.res.Start).Round(time.Millisecond)
	}
	return p
}

// pass records the verdict "healthy".
func (p *probe) pass() {
	p.res.OK, p.res.Reason = true, ""
}

// fail records the verdict "unhealthy" with a reason.
func (p *probe) fail(format string, args ...any) {
	p.res.OK, p.res.Reason = false, fmt.Sprintf(format, args...)
}

// failErr records a failure because of err while doing what ("waiting for
// greeting").
func (p *probe) failErr(err error, what string) {
	p.fail("%s", p.describe(err, what))
}

// end closes c (when not nil) politely after the verdict, releases the
// probe's context and returns the result with the whole duration.
func (p *probe) end(c *net.TCPConn) Result {
	if c != nil {
		p.closePolitely(c)
	}
	p.cancel()
	p.res.Took = time.Since(p.res.Start)
	return p.res
}

// describe words err for an operator. Context state wins over the error
// itself: a socket deadline that fired because the check timed out or was
// canceled reads as that, not as an I/O error.
func (p *probe) describe(err error, what string) string {
	switch {
	case errors.Is(p.ctx.Err(), context.Canceled):
		return "canceled " + what
	case errors.Is(p.ctx.Err(), context.DeadlineExceeded) || isTimeout(err):
		return fmt.Sprintf("timeout after %v %s", p.budget, what)
	}
	return describeErr(err, what)
}

// describeErr words an error that is not a timeout or a cancel.
func describeErr(err error, what string) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connect refused"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset by peer " + what
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by peer " + what
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// isTimeout reports a socket deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
