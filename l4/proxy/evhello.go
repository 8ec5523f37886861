// The ClientHello's pre-read stage (evpreread.go), on a VIP with SNI
// routes: the client's TLS ClientHello is peeked (never read: the backend
// gets every byte, and TLS ends there), its server name picks the route,
// and only then is a backend of that route dialed.

package proxy

import (
	"errors"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/sni"
)

// The loop's copy buffer holds a hello's peek, the parser's scratch for
// a hello split over records, and the lower-cased name: no per-connection
// buffer, nothing allocated.
const (
	helloScratchAt = sni.MaxPeek
	helloLowAt     = helloScratchAt + sni.MaxHello + 4
	helloBufLen    = helloLowAt + maxName
)

// The loop's buffer must hold them (a compile-time check).
var _ = [copyChunk - helloBufLen]struct{}{}

// tlsHandshake is a TLS record's first byte (a ClientHello's record); a
// PostgreSQL startup packet cannot start with it (its length word would
// be over 300 MB).
const tlsHandshake = 0x16

// gotHello parses what the client sent so far (the pre-read stage
// preHello): more to come waits for the next readable edge (the bytes
// stay queued, new ones wake the loop again); a name or a verdict picks
// the route and dials.
func (c *evConn) gotHello(l *loop, p []byte) (more bool) {
	c.mustLive()
	if len(p) == 0 { // a FIN before a whole hello: the backend learns of it as before
		c.route(l, nil, sni.ErrMalformed)
		return false
	}
	if c.pick.routes.Startup && p[0] != tlsHandshake {
		return c.gotStartup(l, p)
	}
	name, more, perr := sni.Parse(p, l.scratch.buf[helloScratchAt:helloLowAt])
	if more {
		if len(p) < sni.MaxPeek {
			return true
		}
		perr = sni.ErrTooLarge
	}
	c.route(l, name, perr)
	return false
}

// route picks the connection's route from the parse's outcome and dials,
// or resets the client when nothing matched and sni_no_match is close.
func (c *evConn) route(l *loop, name []byte, perr error) {
	c.mustLive()
	s := c.svc
	var r *Route
	switch {
	case perr == nil:
		if r = c.pick.routes.Lookup(name, l.scratch.buf[helloLowAt:helloBufLen]); r == nil {
			s.Stats.SNINoMatch.Add(1)
		}
	case errors.Is(perr, sni.ErrNoName):
		s.Stats.SNINoMatch.Add(1)
	default:
		s.Stats.SNINotTLS.Add(1)
	}
	if r == nil && c.pick.routes.NoMatch == NoRouteClose {
		if ce := s.log.Check(zap.DebugLevel, "no SNI route for the client: reset"); ce != nil {
			ce.Write(zap.Stringer("client", c.flow.Src), zap.ByteString("sni", name), zap.NamedError("parse", perr))
		}
		c.resetClient(l, l4.EndSNINoMatch)
		return
	}
	c.routeTo(l, r)
}

// routeTo sends the connection to route r's backends, nil: the VIP's own
// (sni_no_match default), and dials.
func (c *evConn) routeTo(l *loop, r *Route) {
	c.mustLive()
	if r != nil {
		r.Routed.Add(1)
		c.pick.rt, c.pick.snap, c.pick.aff = r, r.Snapshots.Load(), nil // affinity pins are the default route's
	} else {
		c.svc.Stats.SNIDefault.Add(1)
	}
	c.preReadDone(l)
}

// observer is where the connection's connects are reported: its route's
// health, or the VIP's.
func (c *evConn) observer() Observer {
	c.mustLive()
	if c.pick.rt != nil {
		return c.pick.rt.Observer
	}
	return c.svc.obs
}
