// target.go: one tracked backend of the Manager: its probe loop and its guarded state.

package health

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// target is one tracked backend. Fields are ordered by owner.
type target struct {
	key TargetKey

	// Owned by Manager.ctl (Set, Remove, Close): the loop's handle.
	stopLoop context.CancelFunc
	loopDone chan struct{}
	// The agent check's goroutine (agent.go), when the spec has one.
	stopAgent context.CancelFunc
	agentDone chan struct{}

	// emit serialises a state update together with its report, so that
	// events of one target reach the callback in the order of the updates.
	emit sync.Mutex

	// mu guards everything below. addr, spec and tr are written only with
	// Manager.ctl held too, so ctl holders may read them without mu.
	mu      sync.Mutex
	addr    netip.AddrPort // the backend's address (Spec.Port not applied)
	spec    Spec
	tr      *Tracker
	since   time.Time
	reason  string
	last    Result
	checks  uint64
	expiry  *time.Timer // type none: ends a passive mark after FailTimeout
	retired bool        // removed: drop every further update
	agent   AgentState  // what the agent asks for (zero: nothing, or no agent)
}

// trackerConfig is the counting part of s.
func trackerConfig(s Spec) TrackerConfig {
	return TrackerConfig{Rise: s.Rise, Fall: s.Fall, MaxFails: s.MaxFails, FailTimeout: s.FailTimeout}
}

// reset applies a new address and spec (mu held). A new address or check
// type starts the state over; the event reports a resulting transition.
func (t *target) reset(addr netip.AddrPort, spec Spec, down bool, now time.Time) (Event, bool) {
	fresh := t.tr == nil || t.addr != addr || t.spec.Type != spec.Type
	if t.addr != addr || t.spec.Agent.Port != spec.Agent.Port {
		t.agent = AgentState{} // another agent: what the old one said is void
	}
	old := l4.HealthUnknown
	if t.tr != nil {
		old = t.tr.State()
	}
	t.addr, t.spec = addr, spec
	if !fresh {
		t.tr.Reconfigure(trackerConfig(spec)) // a pending expiry re-reads FailTimeout when it fires
		return Event{}, false
	}
	t.stopExpiry()
	t.tr = NewTracker(trackerConfig(spec))
	reason := "reconfigured"
	if down {
		t.tr.StartDown()
		reason = "down in the previous process"
	}
	t.since, t.reason, t.last, t.checks = now, "", Result{}, 0
	ev := Event{Key: t.key, Addr: spec.ProbeAddr(addr), Old: old, New: t.tr.State(), Reason: reason}
	return ev, ev.Changed()
}

// start launches the probe loop (ctl held).
func (t *target) start(m *Manager, checker Checker) {
	ctx, cancel := context.WithCancel(context.Background())
	t.stopLoop, t.loopDone = cancel, make(chan struct{})
	l := loop{m: m, t: t, checker: checker, addr: t.spec.ProbeAddr(t.addr),
		interval: t.spec.Interval, metric: rttMetric(t.spec)}
	// Planned here, not in the goroutine, so a late-scheduled goroutine
	// does not shift the spread.
	first := time.Now().Add(rand.N(l.interval))
	go l.run(ctx, first, t.loopDone)
}

// startAgent launches the agent loop (ctl held) when the spec has one.
func (t *target) startAgent(m *Manager) {
	if !t.spec.Agent.On() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.stopAgent, t.agentDone = cancel, make(chan struct{})
	addr := netip.AddrPortFrom(t.addr.Addr(), t.spec.Agent.Port)
	l := agentLoop{m: m, t: t, checker: newAgentChecker(t.spec), addr: addr, interval: t.spec.Agent.Interval}
	go l.run(ctx, t.agentDone)
}

// cancelLoop asks the loops to stop without waiting (ctl held).
func (t *target) cancelLoop() {
	if t.stopLoop != nil {
		t.stopLoop()
	}
	if t.stopAgent != nil {
		t.stopAgent()
	}
}

// halt stops the loops and waits for them to end (ctl held). An
// in-flight check is canceled: its sockets close at once.
func (t *target) halt() {
	t.cancelLoop()
	if t.loopDone != nil {
		<-t.loopDone
	}
	if t.agentDone != nil {
		<-t.agentDone
	}
	t.stopLoop, t.loopDone, t.stopAgent, t.agentDone = nil, nil, nil, nil
}

// observeAgent applies one agent check (a reply, or err: no usable
// reply, the state stays) and reports it.
func (t *target) observeAgent(m *Manager, line string, reply AgentReply, err error) {
	t.emit.Lock()
	defer t.emit.Unlock()
	t.mu.Lock()
	if t.retired {
		t.mu.Unlock()
		return
	}
	old := t.agent
	next := old
	next.Reply, next.Error = clipWord(line), ""
	if err != nil {
		next.Error = err.Error()
	} else {
		next = next.Apply(reply)
	}
	t.agent = next
	ev := Event{Key: t.key, Addr: t.spec.ProbeAddr(t.addr), Old: t.tr.State(), New: t.tr.State(),
		Agent: true, AgentState: next, AgentChanged: agentPolicy(old) != agentPolicy(next)}
	t.mu.Unlock()
	m.report(ev)
}

// agentPolicy is the part of a state that decides where flows go.
func agentPolicy(s AgentState) AgentState {
	s.Reply, s.Error = "", ""
	return s
}

// retire makes t drop every later update; waiting for emit means that a
// report in progress has finished when retire returns.
func (t *target) retire() {
	t.emit.Lock()
	defer t.emit.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.retired = true
	t.stopExpiry()
}

// armExpiry sets the timer that ends the current passive mark (mu held).
func (t *target) armExpiry(m *Manager, now time.Time) {
	t.stopExpiry()
	if at, ok := t.tr.PassiveUntil(); ok {
		t.expiry = time.AfterFunc(at.Sub(now), func() { t.expire(m) })
	}
}

// stopExpiry cancels a pending passive-mark expiry (mu held).
func (t *target) stopExpiry() {
	if t.expiry != nil {
		t.expiry.Stop()
		t.expiry = nil
	}
}

// observe applies one active result and reports it.
func (t *target) observe(m *Manager, res Result, metric l4.RTTMetric) {
	t.emit.Lock()
	defer t.emit.Unlock()
	t.mu.Lock()
	if t.retired {
		t.mu.Unlock()
		return
	}
	tr := t.tr.Observe(res.OK)
	t.last, t.checks = res, t.checks+1
	ev := Event{Key: t.key, Addr: t.spec.ProbeAddr(t.addr), Result: res, Old: tr.Old, New: tr.New}
	if res.OK {
		ev.RTT = rttSample(res, metric)
	}
	if tr.Changed() {
		ev.Reason = res.Reason
		switch {
		case res.OK:
			okRun, _ := t.tr.Runs()
			ev.Reason = passedReason(tr, okRun, res)
		case res.Reason == "":
			ev.Reason = "check failed" // a checker that gave no reason: still say what happened
		}
		t.since, t.reason = res.Start.Add(res.Took), res.Reason
	}
	t.mu.Unlock()
	m.report(ev)
}

// plural is "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// passedReason says why passing checks changed the state: the first check
// after a start or reset decides at once, a down target needs a run of
// Rise. The connect time tells how the backend answered.
func passedReason(tr Transition, okRun int, res Result) string {
	why := "first check passed"
	if tr.Old != l4.HealthUnknown {
		why = fmt.Sprintf("%d checks passed in a row", okRun)
	}
	if res.Connect > 0 {
		why += fmt.Sprintf(" (connect %v)", res.Connect.Round(time.Microsecond))
	}
	return why
}

// passiveFailure applies one passive failure; only a transition is reported.
func (t *target) passiveFailure(m *Manager) {
	t.emit.Lock()
	defer t.emit.Unlock()
	t.mu.Lock()
	now := time.Now()
	if t.retired {
		t.mu.Unlock()
		return
	}
	trial := t.tr.OnTrial()
	tr := t.tr.PassiveFailure(now)
	if !tr.Changed() {
		t.mu.Unlock()
		return
	}
	t.since = now
	t.reason = fmt.Sprintf("passive: %d failed connect%s within %v", t.spec.MaxFails, plural(t.spec.MaxFails), t.spec.FailTimeout)
	if trial {
		t.reason = "passive: failed again while on trial"
	}
	if t.spec.Type == l4.CheckNone {
		t.armExpiry(m, now)
	}
	ev := Event{Key: t.key, Addr: t.spec.ProbeAddr(t.addr), Passive: true, Old: tr.Old, New: tr.New, Reason: t.reason}
	t.mu.Unlock()
	m.report(ev)
}

// expire ends a passive mark of a target without active checks.
func (t *target) expire(m *Manager) {
	t.emit.Lock()
	defer t.emit.Unlock()
	t.mu.Lock()
	if t.retired || t.spec.Type != l4.CheckNone {
		t.mu.Unlock()
		return
	}
	now := time.Now()
	tr := t.tr.Expire(now)
	if !tr.Changed() {
		t.armExpiry(m, now) // FailTimeout grew since the timer was set
		t.mu.Unlock()
		return
	}
	t.since, t.reason, t.expiry = now, "on trial: passive mark expired; up after a success, down after a failure", nil
	ev := Event{Key: t.key, Addr: t.spec.ProbeAddr(t.addr), Passive: true, Old: tr.Old, New: tr.New,
		Reason: "passive mark expired: on trial"}
	t.mu.Unlock()
	m.report(ev)
}

// passiveSuccess ends a trial, and reports the proxy's connect time as an
// RTT sample.
func (t *target) passiveSuccess(m *Manager, rtt time.Duration) {
	t.emit.Lock()
	defer t.emit.Unlock()
	t.mu.Lock()
	if t.retired {
		t.mu.Unlock()
		return
	}
	tr := t.tr.PassiveOK()
	ev := Event{Key: t.key, Addr: t.spec.ProbeAddr(t.addr), Passive: true, Old: tr.Old, New: tr.New}
	if rtt > 0 && rttMetric(t.spec) == l4.MetricConnect {
		ev.RTT = rtt
	}
	if tr.Changed() {
		t.since, t.reason = time.Now(), ""
		ev.Reason = "passive success while on trial"
	}
	t.mu.Unlock()
	if tr.Changed() || ev.RTT > 0 {
		m.report(ev)
	}
}

// status copies the state for Manager.State.
func (t *target) status(now time.Time) Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok, fail := t.tr.Runs()
	return Status{
		Addr: t.spec.ProbeAddr(t.addr), Health: t.tr.State(), Since: t.since, Reason: t.reason,
		Last: t.last, Checks: t.checks, OKRun: ok, FailRun: fail,
		PassiveFails: t.tr.PassiveFails(now), PassiveDown: t.tr.PassiveDown(), Trial: t.tr.OnTrial(),
		AgentOn: t.spec.Agent.On(), Agent: t.agent,
	}
}

// rttMetric is the metric whose samples the spec's checks give: first_byte
// only for checks that read a reply.
func rttMetric(s Spec) l4.RTTMetric {
	if s.Metric == l4.MetricFirstByte && s.Type != l4.CheckTCP && s.Type != l4.CheckNone {
		return l4.MetricFirstByte
	}
	return l4.MetricConnect
}

// rttSample picks the RTT sample of a result.
func rttSample(res Result, metric l4.RTTMetric) time.Duration {
	if metric == l4.MetricFirstByte {
		return res.FirstByte
	}
	return res.Connect
}

// loop is one target's probe goroutine. Its parameters are copied at
// start: an update halts the loop and starts a new one.
type loop struct {
	m        *Manager
	t        *target
	checker  Checker
	addr     netip.AddrPort
	interval time.Duration
	metric   l4.RTTMetric
}

// run probes until ctx ends. The first probe comes at a uniformly random
// point of the first interval, so targets added together (a config load)
// spread out; each later start is the previous scheduled start plus the
// interval varied by ±10%, so they do not realign. A loop that falls
// behind (a slow check) starts at once rather than bursting to catch up.
func (l loop) run(ctx context.Context, next time.Time, done chan<- struct{}) {
	defer close(done)
	l.m.planned(l.t.key, next, false)
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		res := l.checker.Check(ctx, l.addr)
		if ctx.Err() != nil {
			return // halted mid-check: the result is about the old config
		}
		l.t.observe(l.m, res, l.metric)
		next = next.Add(jittered(l.interval))
		late := false
		if now := time.Now(); next.Before(now) {
			next, late = now, true
		}
		l.m.planned(l.t.key, next, late)
		timer.Reset(time.Until(next))
	}
}

// jittered returns d varied uniformly by ±jitter.
func jittered(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*2-1)*jitter*float64(d))
}
