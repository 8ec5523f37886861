// tracker.go: the rise/fall state machine with nginx-style passive marks; pure, no clock of its own.

package health

import (
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Transition is a state before and after one input to a Tracker.
type Transition struct {
	Old, New l4.Health
}

// Changed reports whether the input changed the state.
func (t Transition) Changed() bool { return t.Old != t.New }

// TrackerConfig is the counting part of a Spec.
type TrackerConfig struct {
	Rise, Fall  int           // consecutive active results to come up / go down; < 1 means 1
	MaxFails    int           // passive failures within FailTimeout that mark down; 0 = off
	FailTimeout time.Duration // the passive window; also how long a passive mark lasts without active checks
}

// Tracker turns check results and passive marks into a Health state.
//
// Semantics:
//   - A new tracker is Unknown, which l4lb treats as eligible. The first
//     active result decides at once: success -> Up, failure -> Down. A
//     fresh balancer thus stops sending to a dead backend after one probe
//     instead of Fall probes, and a live one that flaps on its first probe
//     needs Rise successes (HAProxy behaves the same: a server starts up
//     with its health at the threshold).
//   - Up: Fall consecutive failures -> Down. Down: Rise consecutive
//     successes -> Up. A result of the other kind resets the run.
//   - Passive failures (connects the proxy saw fail) are counted apart from
//     the active run: MaxFails of them within FailTimeout (a sliding
//     window) mark the target Down at once, from Up or Unknown. They do not
//     add to the active failure run.
//   - Every passive failure, counted to a mark or not, resets the active
//     success run: a target marked down passively needs Rise good probes
//     after its last passive failure to come back. The window itself does
//     not bring it back while active checks run.
//   - Without active checks (type none) a passive mark lasts FailTimeout:
//     Expire then puts the target on trial (nginx: the server is tried
//     again after fail_timeout): Unknown, so eligible, until the next
//     passive result decides: a success (PassiveOK) makes it Up, a single
//     failure takes it Down again at once. So a backend that is still dead
//     never shows as up.
//
// The zero Tracker is not usable; make one with NewTracker.
type Tracker struct {
	cfg     TrackerConfig
	state   l4.Health
	okRun   int
	failRun int
	// fails is a ring of the last MaxFails passive failure times; next is
	// where the next one goes and n how many it holds.
	fails []time.Time
	next  int
	n     int
	// passiveAt is when the last passive mark took the target down; zero
	// when the current Down (if any) came from active checks.
	passiveAt time.Time
	// trial: a passive mark expired and no passive result came since.
	trial bool
}

// NewTracker returns an Unknown tracker.
func NewTracker(cfg TrackerConfig) *Tracker {
	t := &Tracker{}
	t.Reconfigure(cfg)
	return t
}

// Reconfigure changes the counts and keeps the state. A changed MaxFails
// forgets the passive failures counted so far.
func (t *Tracker) Reconfigure(cfg TrackerConfig) {
	cfg.Rise, cfg.Fall = max(cfg.Rise, 1), max(cfg.Fall, 1)
	cfg.MaxFails = max(cfg.MaxFails, 0)
	if cfg.MaxFails != t.cfg.MaxFails || t.fails == nil {
		t.fails, t.next, t.n = make([]time.Time, cfg.MaxFails), 0, 0
	}
	t.cfg = cfg
}

// State returns the current state.
func (t *Tracker) State() l4.Health { return t.state }

// StartDown makes a tracker that has seen nothing Down, so that Rise
// successes bring it up rather than the first: its target was down in
// the process before this one (a state file, an upgrade).
func (t *Tracker) StartDown() {
	if t.state == l4.HealthUnknown && t.okRun == 0 && t.failRun == 0 {
		t.state = l4.HealthDown
	}
}

// Runs returns the consecutive active successes and failures (one is 0).
func (t *Tracker) Runs() (ok, fail int) { return t.okRun, t.failRun }

// OnTrial reports whether an expired passive mark put the target on trial.
func (t *Tracker) OnTrial() bool { return t.trial }

// PassiveDown reports whether the current Down came from a passive mark.
func (t *Tracker) PassiveDown() bool { return t.state == l4.HealthDown && !t.passiveAt.IsZero() }

// PassiveUntil returns when the current passive mark ends for a target
// without active checks (see Expire), and false when there is none.
func (t *Tracker) PassiveUntil() (time.Time, bool) {
	if !t.PassiveDown() {
		return time.Time{}, false
	}
	return t.passiveAt.Add(t.cfg.FailTimeout), true
}

// Observe feeds one active check result.
func (t *Tracker) Observe(ok bool) Transition {
	old := t.state
	if ok {
		t.okRun, t.failRun = t.okRun+1, 0
	} else {
		t.okRun, t.failRun = 0, t.failRun+1
	}
	switch {
	case old == l4.HealthUnknown && ok, old == l4.HealthDown && t.okRun >= t.cfg.Rise:
		t.setState(l4.HealthUp)
	case old == l4.HealthUnknown && !ok, old == l4.HealthUp && t.failRun >= t.cfg.Fall:
		t.setState(l4.HealthDown)
	}
	return Transition{old, t.state}
}

// PassiveFailure counts one failed connect seen by the proxy at now.
func (t *Tracker) PassiveFailure(now time.Time) Transition {
	old := t.state
	if t.cfg.MaxFails == 0 {
		return Transition{old, old}
	}
	t.okRun = 0
	t.fails[t.next] = now
	t.next = (t.next + 1) % len(t.fails)
	t.n = min(t.n+1, len(t.fails))
	if (t.trial || t.PassiveFails(now) >= t.cfg.MaxFails) && old != l4.HealthDown {
		t.setState(l4.HealthDown)
		t.failRun = 0
		t.passiveAt = now
	}
	return Transition{old, t.state}
}

// PassiveFails returns how many counted passive failures lie within
// FailTimeout before now.
func (t *Tracker) PassiveFails(now time.Time) int {
	c := 0
	for i := 0; i < t.n; i++ {
		if now.Sub(t.fails[i]) < t.cfg.FailTimeout {
			c++
		}
	}
	return c
}

// Expire ends a passive mark once FailTimeout has passed since it was
// set, putting the target on trial. Only targets without active checks
// call it; with active checks a passively marked target needs Rise good
// probes instead.
func (t *Tracker) Expire(now time.Time) Transition {
	old := t.state
	if t.PassiveDown() && now.Sub(t.passiveAt) >= t.cfg.FailTimeout {
		t.setState(l4.HealthUnknown)
		t.trial = true
		t.n, t.next = 0, 0
	}
	return Transition{old, t.state}
}

// PassiveOK records a success the proxy saw (a connect, a reply): it ends
// a trial with Up.
func (t *Tracker) PassiveOK() Transition {
	old := t.state
	if t.trial {
		t.setState(l4.HealthUp)
	}
	return Transition{old, t.state}
}

// setState moves to s and forgets which mechanism set the previous state.
func (t *Tracker) setState(s l4.Health) {
	t.state = s
	t.passiveAt = time.Time{}
	t.trial = false
}
