// Health: probe targets per backend, transitions to snapshots, passive
// marks and RTT samples from the proxy, slow start and on_down.

package reconcile

import (
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/health"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// slowStartStep is how often a ramping backend's weight is recomputed.
const slowStartStep = 500 * time.Millisecond

func healthSpec(h config.Health, metric l4.RTTMetric) health.Spec {
	return health.Spec{
		Type: h.Type, Interval: h.Interval, Timeout: h.Timeout, Rise: h.Rise, Fall: h.Fall,
		Port: uint16(h.Port), MaxFails: h.MaxFails, FailTimeout: h.FailTimeout, Metric: metric,
		Send: h.Send, Expect: h.Expect, ExpectRegex: h.ExpectRegex,
		Path: h.Path, Host: h.Host, Status: h.Status, WebSocket: h.WebSocket,
		User: h.User, Password: h.Password, Database: h.Database, Role: h.Role,
		MaxLag: h.MaxLag, ProxyHeader: h.SendProxy,
		DNSName: h.DNSName, DNSType: h.DNSType.Code(), TLSServerName: h.TLSServerName, TLSVerify: h.TLSVerify,
		Agent: health.AgentSpec{Port: uint16(h.AgentPort), Interval: h.AgentInterval, Timeout: h.AgentTimeout, Send: h.AgentSend},
	}
}

func (v *vip) target(id l4.BackendID) health.TargetKey {
	return health.TargetKey{VIP: v.id, Backend: id}
}

// syncHealth gives every backend of the VIP its probe target with the
// VIP's spec (a no-op for unchanged ones) and removes targets of backends
// that are gone.
func (r *Runtime) syncHealth(v *vip, removed []l4.BackendID) {
	vc := v.cfg()
	spec := healthSpec(vc.Health, vc.LeastTimeMetric)
	for _, id := range removed {
		r.health.Remove(v.target(id))
	}
	v.mu.Lock()
	targets := make(map[l4.BackendID]*l4.Backend, len(v.backends))
	down := map[l4.BackendID]bool{} // down already: carried over from the previous process
	for id, b := range v.backends {
		targets[id] = b.b
		down[id] = b.health == l4.HealthDown
	}
	v.mu.Unlock()
	router, _ := v.dp.(plane.ProbeRouter)
	for id, b := range targets {
		spec := spec
		if router != nil && spec.Type != l4.CheckNone {
			spec.Route, _ = router.ProbeRoute(b)
		}
		set := r.health.Set
		if down[id] {
			set = r.health.SetDown // a new target starts down; an existing one is as it is
		}
		if err := set(v.target(id), b.Addr, spec); err != nil {
			r.log.Error("health check not started", zap.String("vip", vc.Name), zap.String("backend", string(id)), zap.Error(err))
		}
	}
}

// onHealth receives every probe result and passive mark. It runs on probe
// goroutines and the event loops and must not block: it takes only
// the VIP's own lock, never the runtime's.
func (r *Runtime) onHealth(ev health.Event) {
	v := r.lookupVIP(ev.Key.VIP)
	if v == nil {
		return
	}
	if ev.Agent {
		v.setAgent(ev.Key.Backend, ev.AgentState, ev.AgentChanged)
		return
	}
	if ev.RTT > 0 {
		if b := v.backendByID(ev.Key.Backend); b != nil {
			b.ObserveRTT(ev.RTT)
		}
	}
	if !ev.Passive && readsLag(&v.cfg().Health) {
		v.setLag(ev.Key.Backend, ev.Result.Lag)
	}
	if ev.Changed() {
		v.setHealth(ev.Key.Backend, ev.New, ev.Reason, ev.Passive)
		r.stateChanged()
	} else if !ev.Passive && !ev.Result.OK && ev.New == l4.HealthDown {
		v.confirmDown(ev.Key.Backend)
	}
}

// readsLag reports whether h's checks read a replica's lag (role replica:
// postgres and mysql only). Other VIPs never take a lock for it, and a
// reload to another role drops the lags.
func readsLag(h *config.Health) bool { return h.Role == l4.RoleReplica }

// setLag records the replica lag an active check read (zero: it read
// none), and publishes a snapshot when lag_weight moves the weight.
func (v *vip) setLag(id l4.BackendID, lag health.ReplicaLag) {
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.backends[id]
	if !ok || b.lag == lag {
		return
	}
	h := &v.cfg().Health
	before := health.LagWeight(b.weight, b.lag, h.LagWeight, h.MaxLag)
	b.lag = lag
	if b.eligible() && health.LagWeight(b.weight, lag, h.LagWeight, h.MaxLag) != before {
		_ = v.rebuildLocked() // logged there
	}
}

// setHealth records a transition and publishes a snapshot without (or with)
// the backend at once.
func (v *vip) setHealth(id l4.BackendID, h l4.Health, reason string, passive bool) {
	v.mu.Lock()
	b, ok := v.backends[id]
	if !ok || b.health == h {
		v.mu.Unlock()
		return
	}
	old := b.health
	b.health = h
	if old == l4.HealthDown && h == l4.HealthUp {
		b.upSince = time.Now()
	}
	b.passive, b.downAt = passive && h == l4.HealthDown, time.Now()
	v.setTrial(b, old == l4.HealthDown && h == l4.HealthUnknown)
	b.b.SetEligible(b.keepsPinned())
	_ = v.rebuildLocked() // logged there
	vc := v.cfg()
	kept := b.ejectKept
	v.mu.Unlock()
	if kept {
		v.log.Warn("backend health changed", zap.String("backend", string(id)), zap.Stringer("from", old), zap.Stringer("to", h),
			zap.String("reason", reason), zap.String("kept_in", "max_ejected"))
		return // not out: its connections stay, nothing else changes
	}

	level := zap.InfoLevel
	if h == l4.HealthDown {
		level = zap.WarnLevel
	}
	v.log.Log(level, "backend health changed", zap.String("backend", string(id)), zap.Stringer("from", old), zap.Stringer("to", h), zap.String("reason", reason))
	if h == l4.HealthDown {
		v.wentDown(b, vc)
	}
	if h == l4.HealthUp && vc.Health.SlowStart > 0 {
		v.startRamp()
	}
}

// setTrial records whether b is on trial (v.mu held).
func (v *vip) setTrial(b *backend, on bool) {
	if b.trial == on {
		return
	}
	b.trial = on
	if on {
		v.trials.Add(1)
	} else {
		v.trials.Add(-1)
	}
}

// rebuildLocked publishes a snapshot of the current backend set. A build
// failure keeps the previous snapshot (it cannot happen for a set that
// built before); a data plane that cannot take it is logged and reported.
func (v *vip) rebuildLocked() error {
	v.capEjectionsLocked()
	v.keepLastLocked()
	opts, err := balanceOptions(v.cfg())
	if err != nil {
		v.log.Error("snapshot rebuild failed; previous one kept", zap.Error(err))
		return err
	}
	ms, serving := v.effective(time.Now())
	snap, err := buildSnapshot(opts, ms)
	if err != nil {
		v.log.Error("snapshot rebuild failed; previous one kept", zap.Error(err))
		return err
	}
	v.servingChanged(serving)
	if err := v.publishLocked(snap); err != nil {
		v.log.Error("data plane did not take the new snapshot", zap.Error(err))
		return err
	}
	return nil
}

// startRamp runs one goroutine per VIP that recomputes slow-start weights
// until every backend is at full weight.
func (v *vip) startRamp() {
	if !v.ramping.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer v.ramping.Store(false)
		t := time.NewTicker(slowStartStep)
		defer t.Stop()
		for range t.C {
			v.mu.Lock()
			_ = v.rebuildLocked() // logged there
			done := !v.rampingLocked(time.Now())
			v.mu.Unlock()
			if done || v.stopped.Load() {
				return
			}
		}
	}()
}

func (v *vip) rampingLocked(now time.Time) bool {
	window := v.cfg().Health.SlowStart
	for _, b := range v.backends {
		if !b.upSince.IsZero() && now.Sub(b.upSince) < window {
			return true
		}
	}
	return false
}

// backendByID returns the live backend with id, or nil.
func (v *vip) backendByID(id l4.BackendID) *l4.Backend {
	v.mu.Lock()
	defer v.mu.Unlock()
	if b, ok := v.backends[id]; ok {
		return b.b
	}
	return nil
}

// healthStatus fills the health fields of a backend's status.
func (r *Runtime) healthStatus(v *vip, bs *plane.BackendStatus) {
	st, ok := r.health.State(v.target(l4.BackendID(bs.ID)))
	if !ok {
		return
	}
	bs.Reason = st.Reason
	bs.Trial = st.Trial
	if !st.Since.IsZero() {
		bs.Since = st.Since
	}
	if st.Checks > 0 {
		bs.LastCheck = "ok"
		if !st.Last.OK {
			bs.LastCheck = st.Last.Reason
		}
	}
}

// closeGracefully ends the established flows of b, which went down, in
// order (on_down = "graceful"): at a boundary of the VIP's app_protocol,
// or with a FIN both ways at once without one. Planes that cannot close
// flows one by one (UDP, xdp) keep them.
func (v *vip) closeGracefully(b *l4.Backend) {
	n, err := v.dp.CloseSome(b, math.MaxInt, false)
	if err != nil {
		v.log.Info("on_down graceful: the data plane keeps the flows", zap.String("backend", string(b.ID)), zap.Error(err))
		return
	}
	v.log.Info("on_down graceful: closing at a boundary", zap.String("backend", string(b.ID)), zap.Int("closing", n))
}

// lagStatus is a lag as status and explain show it.
func lagStatus(l health.ReplicaLag) plane.ReplicaLag {
	switch {
	case l.Known:
		s := l.Lag.Seconds()
		return plane.ReplicaLag{Seconds: &s}
	case l.Read:
		return plane.ReplicaLag{Unknown: l.Why}
	}
	return plane.ReplicaLag{}
}
