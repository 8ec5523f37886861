// lag.go: a replica's replication lag as the postgres and mysql checks read it, max_lag's verdict and lag_weight's scale.

package health

import (
	"fmt"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// ReplicaLag is what a check with role replica read of the server's
// replication lag. The zero value: not read (another role, or the check
// failed before it got there).
type ReplicaLag struct {
	// Read: the check asked the server (a replica check that logged in).
	Read bool
	// Known: Lag is the lag. Unknown (Read and not Known) counts as above
	// any max_lag; Why says why it is unknown.
	Known bool
	Lag   time.Duration
	Why   string
}

// knownLag is a lag that was read and is known.
func knownLag(d time.Duration) ReplicaLag {
	return ReplicaLag{Read: true, Known: true, Lag: max(d, 0)}
}

// unknownLag is a lag that was asked for and cannot be told.
func unknownLag(format string, args ...any) ReplicaLag {
	return ReplicaLag{Read: true, Why: fmt.Sprintf(format, args...)}
}

// String is the lag as status shows it: "1.2s", or "unknown (why)".
func (l ReplicaLag) String() string {
	switch {
	case !l.Read:
		return ""
	case !l.Known:
		return "unknown (" + l.Why + ")"
	}
	return l4.LagString(l.Lag)
}

// judgeLag fails a replica whose lag is unknown or above maxLag; 0 = off.
// A check that passed stays passed otherwise.
func judgeLag(p *probe, lag ReplicaLag, maxLag time.Duration) {
	p.res.Lag = lag
	switch {
	case maxLag <= 0 || !p.res.OK:
	case !lag.Known:
		p.fail("replica lag unknown: %s (max_lag %v)", lag.Why, maxLag)
	case lag.Lag > maxLag:
		p.fail("replica lag %s > max_lag %v", l4.LagString(lag.Lag), maxLag)
	}
}

// LagWeight scales weight down for a replica lagging between soft
// (lag_weight) and hard (max_lag): full weight up to soft, then linearly
// down to the floor slow start starts from (10% of weight, at least 1)
// at hard; the floor above hard and while the lag is unknown (the check
// takes the backend out there, after fall checks). A zero soft, a zero
// weight (drain) or a lag not read gives weight unchanged. Pure, like
// SlowStartWeight, which the runtime composes it with.
func LagWeight(weight uint32, lag ReplicaLag, soft, hard time.Duration) uint32 {
	if weight == 0 || soft <= 0 || hard <= soft || !lag.Read {
		return weight
	}
	if lag.Known && lag.Lag <= soft {
		return weight
	}
	floor := weightFloor(weight)
	if !lag.Known || lag.Lag >= hard {
		return uint32(floor)
	}
	frac := float64(hard-lag.Lag) / float64(hard-soft) // in (0, 1)
	w := floor + uint64(float64(uint64(weight)-floor)*frac)
	return uint32(min(w, uint64(weight)))
}
