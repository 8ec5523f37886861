// tlscheck.go: the tls check: a TLS handshake, ClientHello sent and ServerHello expected.

package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// tlsChecker connects, sends a ClientHello (with SNI when a server name
// is set) and passes when the handshake completes: the server answered
// with a ServerHello and its certificate, and accepted the client's
// Finished. Without verify any certificate passes (a backend's
// self-signed one, an IP address as its name); with it the chain must
// lead to a root of the system's store and name the server name. The
// probe then sends close_notify, half-closes and waits for the server's
// FIN, so the server logs a clean close. A server that speaks plain TCP
// fails: its reply is no TLS record, or it waits for a request and the
// handshake times out.
type tlsChecker struct {
	connOpts
	conf *tls.Config
}

func newTLS(s Spec) *tlsChecker {
	return &tlsChecker{connOpts: optsOf(s), conf: &tls.Config{
		ServerName:         s.TLSServerName,
		InsecureSkipVerify: !s.TLSVerify, //nolint:gosec // checks see self-signed certificates; tls_verify turns verification on
		MinVersion:         tls.VersionTLS10,
	}}
}

func (ch *tlsChecker) Check(ctx context.Context, addr netip.AddrPort) Result {
	return overConn(ctx, ch.connOpts, addr, ch.exchange)
}

// exchange runs the handshake over c.
func (ch *tlsChecker) exchange(p *probe, c net.Conn) {
	start := time.Now()
	tc := tls.Client(handshakeTimer{Conn: c, p: p, start: start}, ch.conf)
	if err := tc.HandshakeContext(p.ctx); err != nil {
		p.fail("%s", ch.describe(p, err))
		return
	}
	_ = tc.CloseWrite() // close_notify; closePolitely half-closes the TCP side
	p.pass()
}

// describe words a failed handshake.
func (ch *tlsChecker) describe(p *probe, err error) string {
	var rec tls.RecordHeaderError
	var cert *tls.CertificateVerificationError
	var alert tls.AlertError
	switch {
	case errors.As(err, &rec):
		return fmt.Sprintf("no TLS handshake: the server answered %q", rec.RecordHeader[:])
	case errors.As(err, &cert):
		return "certificate not trusted: " + cert.Err.Error()
	case errors.As(err, &alert):
		return "TLS alert from the server: " + alert.Error()
	case strings.Contains(err.Error(), "x509:"):
		return "certificate not trusted: " + err.Error()
	}
	const what = "waiting for the TLS handshake"
	msg := p.describe(err, what)
	if rest, ok := strings.CutPrefix(msg, what+": "); ok {
		return "TLS handshake failed: " + rest // the server answered, but not as TLS wants
	}
	return msg
}

// handshakeTimer notes the first byte of the server's reply (the
// ServerHello) as the check's first-byte time.
type handshakeTimer struct {
	net.Conn
	p     *probe
	start time.Time
}

func (h handshakeTimer) Read(b []byte) (int, error) {
	n, err := h.Conn.Read(b)
	if n > 0 && h.p.res.FirstByte == 0 {
		h.p.res.FirstByte = max(time.Since(h.start), 1)
	}
	return n, err
}
