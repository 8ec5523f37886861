// manager.go: runs the checks of many targets, applies passive marks and reports results and transitions.

package health

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// jitter is the ± share of the interval by which every cycle varies, so
// that targets started together drift apart and stay apart.
const jitter = 0.10

// ErrClosed is returned by Set after Close.
var ErrClosed = errors.New("health manager closed")

// TargetKey identifies a probed backend: its VIP's name and its ID there.
type TargetKey struct {
	VIP     string
	Backend l4.BackendID
}

func (k TargetKey) String() string { return k.VIP + "/" + string(k.Backend) }

// Event is one report: an active check's result, a passive mark, or a
// passive RTT sample. Old and New differ exactly when the state changed;
// each transition is reported once.
type Event struct {
	Key  TargetKey
	Addr netip.AddrPort // the address probed (the backend's, or with Spec.Port)
	// Result of the active check; zero for passive events.
	Result  Result
	Passive bool
	// RTT is the sample to feed the backend's estimate (Backend.ObserveRTT);
	// 0 = none. Active checks give one only when OK: Connect, or FirstByte
	// with Spec.Metric first_byte (Connect for the tcp check, which has no
	// reply). PassiveSuccess gives its connect time with metric connect.
	RTT      time.Duration
	Old, New l4.Health
	// Reason is why the state changed; set on transitions only.
	Reason string
	// Agent: the event is an agent check's (Result, RTT and the
	// transition fields are zero): AgentState is what the agent asks for
	// now, AgentChanged tells that a reply changed it.
	Agent        bool
	AgentState   AgentState
	AgentChanged bool
}

// Changed reports whether the event is a state transition.
func (e Event) Changed() bool { return e.Old != e.New }

// Status is a target's state as Manager.State reports it.
type Status struct {
	Addr   netip.AddrPort // the address probed
	Health l4.Health
	// Since is when Health last changed, or when the target was added or
	// reset. Slow start ramps from it.
	Since time.Time
	// Reason is why the target is in its state (the failure that took it
	// down, or the passive mark); empty when Up or Unknown.
	Reason string
	// Last is the latest active result (zero before the first).
	Last           Result
	Checks         uint64 // active checks completed
	OKRun, FailRun int    // consecutive active results
	PassiveFails   int    // passive failures within FailTimeout now
	PassiveDown    bool   // the current Down came from a passive mark
	Trial          bool   // Unknown because an expired passive mark put it on trial
	// AgentOn: the spec has an agent check; Agent is what it asks for.
	AgentOn bool
	Agent   AgentState
}

// Manager probes targets and reports through one callback. tcp checks of
// every target run on one probe loop (a goroutine with its own epoll set
// and a timer heap: no goroutine, timer or allocation per probe); every
// other check type runs its Checker on a goroutine per target. All methods
// are safe for concurrent use.
//
// report is called for every completed active check, every passive
// transition and every PassiveSuccess sample, from the probe loop, probe
// goroutines and the callers of the Passive methods, one call at a time
// per target and in order. It must return quickly and must not call Set, Remove,
// Close or the Passive methods (State is fine).
type Manager struct {
	report func(Event)
	// Test seams, set before the first Set: how checkers are made (set:
	// every check type, tcp too, runs its Checker on a goroutine), and a
	// hook that sees every planned probe start (late: the loop had fallen
	// behind and planned "now").
	checkerFor func(Spec) (Checker, error)
	planned    func(key TargetKey, at time.Time, late bool)
	// tcpGoroutines runs tcp checks on a goroutine per target, as before
	// the probe loop (TestProbeCost compares the two); loopEnter runs
	// first on the probe loop's thread (a test enters a namespace).
	tcpGoroutines bool
	loopEnter     func() error

	ctl  sync.Mutex // serialises Set, Remove and Close (they wait for loops)
	loop *probeLoop // guarded by ctl; made for the first tcp target

	mu      sync.Mutex // guards targets and closed
	targets map[TargetKey]*target
	closed  bool
}

// NewManager returns a manager that reports to report (nil: discard).
func NewManager(report func(Event)) *Manager {
	if report == nil {
		report = func(Event) {}
	}
	return &Manager{report: report,
		planned: func(TargetKey, time.Time, bool) {}, targets: make(map[TargetKey]*target)}
}

// Set adds a target or updates it. An unchanged address and spec leave
// the running loop alone. Otherwise the loop restarts (first probe at a
// random point of the interval); the state is kept unless the address or
// the check type changed, which resets it to Unknown (reported as a
// transition when it was not Unknown).
func (m *Manager) Set(key TargetKey, addr netip.AddrPort, spec Spec) error {
	return m.set(key, addr, spec, false)
}

// SetDown is Set for a target that was down in the process before this
// one (l4lb's state file, an upgrade): a new target starts Down, so it
// comes up after Rise passing checks, as it would have there, rather
// than after the first. A target that exists already is Set as usual.
func (m *Manager) SetDown(key TargetKey, addr netip.AddrPort, spec Spec) error {
	return m.set(key, addr, spec, true)
}

func (m *Manager) set(key TargetKey, addr netip.AddrPort, spec Spec, down bool) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("health %s: %w", key, err)
	}
	spec = spec.withDefaults()
	checker, err := m.checker(spec)
	if err != nil {
		return fmt.Errorf("health %s: %w", key, err)
	}
	m.ctl.Lock()
	defer m.ctl.Unlock()
	m.mu.Lock()
	closed, t := m.closed, m.targets[key]
	m.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if t != nil && t.addr == addr && t.spec.Equal(spec) {
		return nil
	}
	if t == nil {
		t = &target{key: key}
	}
	t.halt()
	m.reconfigure(t, addr, spec, down)
	if checker != nil && !m.startOnLoop(t) {
		t.start(m, checker)
	}
	t.startAgent(m)
	// Published only now: the Passive methods and State never see a
	// target without a tracker.
	m.mu.Lock()
	m.targets[key] = t
	m.mu.Unlock()
	return nil
}

// checker makes spec's checker; nil for type none.
func (m *Manager) checker(spec Spec) (Checker, error) {
	if spec.Type == l4.CheckNone {
		return nil, nil
	}
	if m.checkerFor == nil {
		return NewChecker(spec)
	}
	return m.checkerFor(spec)
}

// startOnLoop hands a reconfigured target's tcp checks to the probe loop
// (ctl held), made on first use. It reports false when the target's
// checks run on a goroutine instead: another check type, a test seam, an
// IPv6 address with a zone, or a loop that could not start (the
// goroutine path then runs the same check).
func (m *Manager) startOnLoop(t *target) bool {
	if t.spec.Type != l4.CheckTCP || m.checkerFor != nil || m.tcpGoroutines {
		return false
	}
	p, ok := newLoopProbe(t, t.spec.ProbeAddr(t.addr), t.spec)
	if !ok {
		return false
	}
	if m.loop == nil {
		l, err := newProbeLoop(m, m.loopEnter)
		if err != nil {
			return false
		}
		m.loop = l
	}
	first := time.Now().Add(rand.N(t.spec.Interval)) // spread as the goroutine loop does
	m.planned(t.key, first, false)
	t.stopLoop, t.loopDone = m.loop.add(p, first)
	return true
}

// Remove stops probing key. No event for key is reported after it returns.
func (m *Manager) Remove(key TargetKey) {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	m.mu.Lock()
	t := m.targets[key]
	delete(m.targets, key)
	m.mu.Unlock()
	if t != nil {
		t.halt()
		t.retire()
	}
}

// Close stops every target; Set fails afterwards. It returns when every
// probe goroutine has ended.
func (m *Manager) Close() {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	m.mu.Lock()
	m.closed = true
	all := m.targets
	m.targets = map[TargetKey]*target{}
	m.mu.Unlock()
	for _, t := range all {
		t.cancelLoop() // all at once, then wait: in-flight checks end together
	}
	for _, t := range all {
		t.halt()
		t.retire()
	}
	if m.loop != nil {
		m.loop.close()
		m.loop = nil
	}
}

// Keys returns the targets being tracked, in no order.
func (m *Manager) Keys() []TargetKey {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]TargetKey, 0, len(m.targets))
	for k := range m.targets {
		keys = append(keys, k)
	}
	return keys
}

// State returns key's status and whether key is tracked.
func (m *Manager) State(key TargetKey) (Status, bool) {
	t := m.lookup(key)
	if t == nil {
		return Status{}, false
	}
	return t.status(time.Now()), true
}

// PassiveFailure counts a failed connect to key seen by the proxy (refused
// or timed out). It reports whether key is tracked. See Tracker for how
// passive marks combine with active checks.
func (m *Manager) PassiveFailure(key TargetKey) bool {
	t := m.lookup(key)
	if t == nil {
		return false
	}
	t.passiveFailure(m)
	return true
}

// PassiveSuccess reports a success the proxy saw (a connect completed in
// connectRTT, or 0 for a UDP reply), as an Event carrying the sample (when
// the metric is connect), so that probe and proxy samples reach the
// runtime through one path. It ends a trial (see Tracker) and otherwise
// does not change the state. It reports whether key is tracked.
func (m *Manager) PassiveSuccess(key TargetKey, connectRTT time.Duration) bool {
	t := m.lookup(key)
	if t == nil {
		return false
	}
	t.passiveSuccess(m, connectRTT)
	return true
}

// lookup finds a tracked target.
func (m *Manager) lookup(key TargetKey) *target {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.targets[key]
}

// reconfigure applies a new address and spec to a halted target.
func (m *Manager) reconfigure(t *target, addr netip.AddrPort, spec Spec, down bool) {
	t.emit.Lock()
	defer t.emit.Unlock()
	t.mu.Lock()
	ev, changed := t.reset(addr, spec, down, time.Now())
	t.mu.Unlock()
	if changed {
		m.report(ev)
	}
}
