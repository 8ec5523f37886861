// failover_hold: a client that comes while the VIP has no backend to take
// it (all down, as for the seconds of a primary's promotion) waits in the
// VIP's queue, nothing dialed, instead of being reset, and is served in
// arrival order by the first backend that becomes eligible.

package proxy

import (
	"cmp"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
)

// maxHeld bounds the connections a VIP without max_conns holds at once
// (with max_conns, that is the bound): each holds a descriptor, and a VIP
// whose backends stay down must not take the whole process budget.
const maxHeld = 4096

// holds reports whether c, which found no backend, should wait for one:
// failover_hold is on, and the VIP has no eligible backend or c's connects
// failed on every one it tried (the seconds before health checks see a
// primary gone).
func (c *evConn) holds() bool {
	c.mustLive()
	return c.st.FailoverHold > 0 && (c.pick.snap.Len() == 0 || c.pick.attempts > 0 || c.in.hold)
}

// holdFailover parks c until a snapshot offers a backend (its publish serves the
// queue), or until failover_hold since it first came here runs out.
// failedOn is the generation of the snapshot whose backends all failed c's
// connects (0: none): c tries again only from a newer one, with its tries
// forgotten. Past the bound the client is reset as without the hold.
func (c *evConn) holdFailover(l *loop, failedOn uint64) {
	c.mustLive()
	s := c.svc
	if !c.in.hold {
		if s.Stats.Holding.Load() >= int64(cmp.Or(c.st.MaxConns, maxHeld)) {
			s.Stats.HoldOverflows.Add(1)
			s.rateLog("failover hold full: client reset", zap.Stringer("client", c.flow.Src), zap.Int64("holding", s.Stats.Holding.Load()))
			c.noBackend(l, balance.ErrNoBackend, c.noBackendWhy())
			return
		}
		s.Stats.Holding.Add(1)
		s.Stats.Held.Add(1)
		c.in.hold = true
		c.times.queueUntil = l.now() + int64(c.st.FailoverHold)
	}
	c.pick.tried, c.pick.attempts = balance.Tried{}, 0
	c.park(l, failedOn, false)
}

// noBackendWhy is how a client that found no backend ends: no backend, or
// how its last connect failed.
func (c *evConn) noBackendWhy() l4.EndReason {
	c.mustLive()
	if c.pick.attempts > 0 {
		return c.pick.lastFail
	}
	return l4.EndNoBackend
}

// unhold takes c out of the hold's count: it reached a backend (released)
// or ended.
func (c *evConn) unhold(released bool) {
	c.mustLive()
	if !c.in.hold {
		return
	}
	c.in.hold = false
	c.svc.Stats.Holding.Add(-1)
	if released {
		c.svc.Stats.HoldReleased.Add(1)
	}
}
