// The startup packet's side of the pre-read stage preHello, on a postgres
// VIP with routes (app_protocol = "postgres"): a client that does not
// open with TLS sends its StartupMessage in plain text, which is peeked
// (never read: the backend gets it unchanged, with everything after), and
// its database and user pick the route. An SSLRequest, GSSENCRequest or
// CancelRequest carries neither (the startup follows inside TLS or GSSAPI,
// a cancel names a backend process), so it goes where sni_no_match says;
// a packet PostgreSQL would refuse is reset.

package proxy

import (
	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/pgstartup"
	"github.com/l4lb/l4lb/l4/sni"
)

// A whole startup packet fits in the stage's peek (a compile-time check).
var _ = [sni.MaxPeek - pgstartup.MaxStartup]struct{}{}

// gotStartup parses what the client sent so far: more to come waits for
// the next readable edge; a verdict routes, or resets the client.
func (c *evConn) gotStartup(l *loop, p []byte) (more bool) {
	c.mustLive()
	m, more, err := pgstartup.Parse(p)
	if more {
		return true // Parse refuses a packet over MaxStartup: the peek holds it
	}
	s := &c.svc.Stats.Startup
	var r *Route
	switch {
	case err != nil:
		s.Malformed.Add(1)
		c.startupReset(l, m, err, l4.EndStartupMalformed)
		return false
	case m.Kind == pgstartup.Startup:
		if r = c.pick.routes.LookupStartup(m.Database, m.User); r != nil {
			s.Routed.Add(1)
		} else {
			s.NoMatch.Add(1)
		}
	case m.Kind == pgstartup.Cancel:
		s.Cancels.Add(1)
	default: // SSL, GSSENC
		s.Encrypted.Add(1)
	}
	if r == nil && c.pick.routes.NoMatch == NoRouteClose {
		c.startupReset(l, m, nil, l4.EndSNINoMatch)
		return false
	}
	c.routeTo(l, r)
	return false
}

// startupReset resets a client whose startup packet no route takes, or
// that is malformed (err), logged at debug level.
func (c *evConn) startupReset(l *loop, m pgstartup.Message, err error, why l4.EndReason) {
	c.mustLive()
	if ce := c.svc.log.Check(zap.DebugLevel, "PostgreSQL startup packet: reset"); ce != nil {
		ce.Write(zap.Stringer("client", c.flow.Src), zap.Stringer("end", why), zap.Uint8("kind", uint8(m.Kind)),
			zap.ByteString("database", m.Database), zap.ByteString("user", m.User), zap.Error(err))
	}
	c.resetClient(l, why)
}
