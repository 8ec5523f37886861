// One running VIP: its service, its backends by identity, its snapshot.

package reconcile

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/health"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/snapshot"
	"github.com/l4lb/l4lb/l4/xdpplane"
)

// vip is a running virtual service.
type vip struct {
	key     l4.VIPKey
	id      string // health and index key: key.String(), or a route's (route.go)
	log     *zap.Logger
	health  *health.Manager
	flows   l4.FlowCounter          // VIP-wide live flows (bounded-load hashing reads it)
	store   snapshot.Store          // the snapshot new flows pick from
	dp      plane.Plane             // moves the traffic: proxy services or XDP maps
	update  func(*config.VIP) error // applies a reload's settings to dp
	guard   *xdpplane.Guard         // a proxy VIP's entry in the XDP program; nil: none
	indexes *xdpplane.IndexPool     // backend indexes, shared by all VIPs
	served  *servedSignal           // poked on every published snapshot (Runtime.Serving)

	conf    atomic.Pointer[config.VIP]
	ramping atomic.Bool // a slow-start goroutine runs
	stopped atomic.Bool
	trials  atomic.Int32 // backends on trial (see backend.trial): ConnectOK looks only when > 0

	mu       sync.Mutex // guards backends, retired and snapshot rebuilds
	backends map[l4.BackendID]*backend
	// retired are backends a reload removed that still hold flows: status
	// shows them until their last flow ends.
	retired []*backend
	// rebal is the running or last rebalance (rebalance.go); nil = none.
	rebal *rebalance
	// carry is what the previous l4lb knew of the backends (an upgrade),
	// for the first plan only.
	carry map[l4.BackendID]BackendState

	// routes are the VIP's SNI routes by name (route.go); changed only
	// under the runtime's lock.
	routes map[string]*vip

	// Failover (failover.go), under mu: the sticky order, the serving set
	// last published and since when panic mode runs; counters for status.
	sticky       stickyState
	serving      string
	panicSince   time.Time
	panics       atomic.Uint64 // times panic mode began
	ejectCapped  atomic.Uint64 // passive marks max_ejected overruled
	backupCloses atomic.Uint64 // backup connections ended by on_backup_recovered
}

// backend is a backend as the runtime tracks it.
type backend struct {
	b       *l4.Backend
	weight  uint32
	health  l4.Health
	upSince time.Time // when it last came back up (slow start ramps from here)
	// lag is the replica lag the last active check read (zero: it read
	// none); lag_weight scales from it, status and explain show it.
	lag health.ReplicaLag
	// scale multiplies the weight of an xdp least_conn or least_time VIP's
	// backend (see xdpplane.NextScales); 0 means 1.
	scale float64
	// trial: a passive mark expired (health type none); the next connect
	// or reply the proxy sees decides, and ConnectOK reports it.
	trial bool
	// stall: its connections stall (stall_timeout): out of new picks
	// (stall.go).
	stall stallState
	// conf is the backend as the file has it: an override lasts while a
	// reload leaves it unchanged.
	conf     config.Backend
	override overrideState
	// agent is what the backend's agent check asks for (agent.go); the
	// zero value asks nothing.
	agent health.AgentState
	// passive: the current Down came from a passive mark (an active
	// check has not failed since), at downAt; ejectKept: max_ejected
	// keeps it in all the same (failover.go).
	passive   bool
	downAt    time.Time
	ejectKept bool
}

// overrideState is an operator's run-time state for a backend: what, who
// and when.
type overrideState struct {
	state l4.Override
	by    string
	since time.Time
}

// eligible reports whether new flows may go to b.
func (b *backend) eligible() bool {
	return b.weight > 0 && !b.down() && b.override.state == l4.OverrideNone && (!b.stall.degraded || b.stall.kept) && b.agent.Admits()
}

// keepsPinned reports whether flows already pinned to b (UDP sessions,
// affinity entries) may stay: an operator's drain keeps them, like
// HAProxy's drain state keeps persistent clients; weight 0 in the file,
// a health failure, a disable or a removal moves them on their next packet.
func (b *backend) keepsPinned() bool {
	return b.eligible() || (b.override.state == l4.OverrideDrain || b.agentDrains()) && b.weight > 0 && !b.down() && !b.agent.Down && b.agent.Admin != health.AgentMaint
}

// down reports whether health takes b out: down, and not kept in by
// max_ejected.
func (b *backend) down() bool { return b.health == l4.HealthDown && !b.ejectKept }

// sameInFile reports whether a reload leaves the backend as the file had
// it (the line it is written on does not matter).
func sameInFile(a, b config.Backend) bool {
	return a.Name == b.Name && a.Address == b.Address && a.Weight == b.Weight && a.Backup == b.Backup
}

// plan is a VIP's next backend set and snapshot, built before anything
// running changes.
type plan struct {
	conf     *config.VIP
	backends map[l4.BackendID]*backend
	snap     *snapshot.Snapshot
	removed  []l4.BackendID
	fresh    []*l4.Backend // backends created for this plan (their indexes are new)
}

// newVIP starts VIP vc at key: its backends, its data plane, and its
// first snapshot. inherit: the VIP's proxy plane still holds connections
// (a mode change), which the new plane leaves alone (plane.ModeChange).
func (r *Runtime) newVIP(key l4.VIPKey, vc *config.VIP, inherit bool) (*vip, error) {
	v := &vip{key: key, id: key.String(), log: r.log.With(zap.String("vip", vc.Name)), health: r.health, indexes: r.indexes, served: r.served, backends: map[l4.BackendID]*backend{},
		carry: r.carry[key.String()]}
	p, err := v.plan(vc)
	v.carry = nil
	if err != nil {
		return nil, err
	}
	if v.dp, v.update, err = r.openPlane(key, vc, v); err != nil {
		p.abandon(v.indexes)
		return nil, err
	}
	if mc, ok := v.dp.(plane.ModeChange); ok && inherit {
		mc.Inherit(true)
	}
	if vc.Mode == l4.ModeProxy && vc.XDPGuardable() {
		v.guard = xdpplane.NewGuard(key, guardOptions(vc), &r.xdpAt, v.log)
	}
	if err := v.commit(p); err != nil {
		v.closeNow()
		return nil, err
	}
	return v, nil
}

func (v *vip) name() string     { return v.conf.Load().Name }
func (v *vip) cfg() *config.VIP { return v.conf.Load() }

func (v *vip) serve() {
	v.guard.Write()
	v.dp.Serve()
}

// stopAccepting stops new flows; established ones continue until drain.
func (v *vip) stopAccepting() {
	v.stopped.Store(true)
	v.served.poke()
	v.guard.Clear()
	v.dp.StopAccepting()
}

func (v *vip) closeNow() {
	v.stopped.Store(true)
	v.guard.Clear()
	v.dp.Close()
	v.releaseIndexes()
}

// drain lets established flows finish until ctx is done and returns how
// many were ended then. The VIP's backend indexes are free afterwards.
func (v *vip) drain(ctx context.Context) int {
	v.stopped.Store(true)
	v.guard.Clear()
	n := v.dp.Drain(ctx)
	v.releaseIndexes()
	return n
}

// releaseIndexes frees the indexes of a VIP that stopped.
func (v *vip) releaseIndexes() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, b := range v.backends {
		v.indexes.Put(b.b.Index)
	}
	v.backends = map[l4.BackendID]*backend{}
}

// apply switches the running VIP to a plan made by plan.
func (v *vip) apply(p *plan) {
	if err := v.update(p.conf); err != nil {
		v.log.Error("settings not applied", zap.Error(err))
	}
	v.guard.Update(guardOptions(p.conf))
	if err := v.commit(p); err != nil {
		v.log.Error("snapshot not published to the data plane", zap.Error(err))
	}
}

// plan builds the backend set for vc, keeping the l4.Backend of every
// backend whose identity and address are unchanged (its live counts, RTT
// estimate and health carry over), and the snapshot over it.
func (v *vip) plan(vc *config.VIP) (*plan, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	next := make(map[l4.BackendID]*backend, len(vc.Backends))
	p := &plan{conf: vc, backends: next}
	for _, bc := range vc.Backends {
		id := l4.BackendID(bc.ID())
		old, ok := v.backends[id]
		nb := &backend{weight: uint32(bc.Weight), conf: bc}
		if ok && old.b.Addr == bc.Address {
			nb.b, nb.health, nb.upSince, nb.trial, nb.scale = old.b, old.health, old.upSince, old.trial, old.scale
			nb.passive, nb.downAt, nb.ejectKept = old.passive, old.downAt, old.ejectKept
			nb.stall = old.stall
			if sameAgent(v.conf.Load(), vc) {
				nb.agent = old.agent
			}
			if readsLag(&vc.Health) {
				nb.lag = old.lag
			}
			if sameInFile(old.conf, bc) {
				nb.override = old.override
			}
		} else {
			nb.b = l4.NewBackend(id, bc.Address, &v.flows)
			if err := v.assignIndex(nb.b, vc.Mode); err != nil {
				p.abandon(v.indexes)
				return nil, err
			}
			p.fresh = append(p.fresh, nb.b)
			if c, ok := v.carry[id]; ok {
				c.apply(nb, vc)
			}
		}
		nb.b.RTT().SetAlpha(vc.LeastTimeAlpha)
		next[id] = nb
	}
	var removed []l4.BackendID
	for id, old := range v.backends {
		if nb, ok := next[id]; !ok || nb.b != old.b {
			removed = append(removed, id)
		}
	}
	opts, err := balanceOptions(vc)
	if err == nil {
		capEjections(next, vc)
		ms, _ := effectiveMembers(next, vc, v.sticky.clone(), time.Now())
		p.snap, err = buildSnapshot(opts, ms)
	}
	if err != nil {
		p.abandon(v.indexes)
		return nil, err
	}
	p.removed = removed
	return p, nil
}

// assignIndex gives a new backend its index: for an xdp VIP the one its
// address had in maps adopted from an earlier l4lb, if any.
func (v *vip) assignIndex(b *l4.Backend, mode l4.Mode) error {
	get := v.indexes.Get
	if mode == l4.ModeXDP {
		get = func() (uint32, error) { return v.indexes.GetFor(b.Addr.Addr()) }
	}
	i, err := get()
	if err != nil {
		return fmt.Errorf("backend %q: %w (backends of all VIPs)", b.ID, err)
	}
	b.Index = i
	return nil
}

// abandon returns the indexes of the backends a plan created, when the
// plan is not committed.
func (p *plan) abandon(pool *xdpplane.IndexPool) {
	for _, b := range p.fresh {
		pool.Put(b.Index)
	}
	p.fresh = nil
}

// commit publishes a plan. Health that changed since the plan was made
// wins, and then the snapshot is rebuilt from it.
func (v *vip) commit(p *plan) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	stale := false
	var gone []*l4.Backend
	defer func() { v.dp.BackendsRemoved(gone, func(b *l4.Backend) { v.indexes.Put(b.Index) }) }()
	for id, old := range v.backends {
		nb, ok := p.backends[id]
		if !ok || nb.b != old.b {
			old.b.SetEligible(false) // removed: pinned flows move on their next packet
			gone = append(gone, old.b)
			if old.b.LiveFlows() > 0 {
				v.retired = append(v.retired, old)
			}
			continue
		}
		keepLag := readsLag(&p.conf.Health)
		keepAgent := sameAgent(v.conf.Load(), p.conf)
		if nb.health != old.health || nb.trial != old.trial || nb.stall != old.stall || nb.passive != old.passive || keepLag && nb.lag != old.lag || keepAgent && nb.agent != old.agent {
			nb.health, nb.upSince, nb.trial, nb.stall, stale = old.health, old.upSince, old.trial, old.stall, true
			nb.passive, nb.downAt = old.passive, old.downAt
			if keepAgent {
				nb.agent = old.agent
			}
			if keepLag {
				nb.lag = old.lag
			}
		}
		// An override set or cleared since the plan was made wins too;
		// one the reload ends (the file changed the backend) is logged.
		if sameInFile(old.conf, nb.conf) {
			if nb.override != old.override {
				nb.override, stale = old.override, true
			}
		} else if old.override.state != l4.OverrideNone {
			v.log.Info("backend override cleared: the reload changed the backend", zap.String("backend", string(id)),
				zap.Stringer("override", old.override.state), zap.String("by", old.override.by))
		}
	}
	trials := int32(0)
	for _, b := range p.backends {
		if b.trial {
			trials++
		}
	}
	v.trials.Store(trials)
	if keepLast(p.backends, p.conf) {
		stale = true
	}
	if _, capped := capEjections(p.backends, p.conf); capped || p.conf.BackupMode == l4.BackupSticky || p.conf.Health.PanicMode {
		stale = true // the running order, the cap and panic are worked out on the running state
	}
	for _, b := range p.backends {
		b.b.SetEligible(b.keepsPinned())
		b.b.SetMaxFlows(b.flowCap(p.conf))
		b.b.SetMaxConnRate(backendRate(p.conf, &b.conf))
	}
	v.backends = p.backends
	v.conf.Store(p.conf)
	if stale {
		return v.rebuildLocked()
	}
	_, serving := effectiveMembers(v.backends, p.conf, nil, time.Now())
	v.servingChanged(serving)
	return v.publishLocked(p.snap)
}

// publishLocked makes snap what new flows pick from (v.mu held).
func (v *vip) publishLocked(snap *snapshot.Snapshot) error {
	v.store.Store(snap)
	v.served.poke()
	return v.dp.Publish(snap)
}

// effective lists the members new flows may go to, with slow-start
// weights, and which set they are (v.mu held: it moves the sticky order).
func (v *vip) effective(now time.Time) ([]balance.Member, string) {
	return effectiveMembers(v.backends, v.cfg(), &v.sticky, now)
}

// effectiveMembers lists the eligible backends with the weights new flows
// see: slow start and replica lag (lag_weight) scaling the configured
// weight, and for xdp VIPs balanced by live flows or RTT, the
// scales that stand in for those algorithms (in hundredths, so that a
// scale below 1 still shifts a backend of weight 1).
func effectiveMembers(bs map[l4.BackendID]*backend, vc *config.VIP, st *stickyState, now time.Time) ([]balance.Member, string) {
	dynamic := scalesWeights(vc)
	set, serving := servingSet(bs, vc, st)
	if len(set) == 0 {
		if set = panicSet(bs, vc); len(set) > 0 {
			serving = servingPanic
		}
	}
	ms := make([]balance.Member, 0, len(set))
	for _, b := range set {
		w := b.weightAt(now, &vc.Health)
		if dynamic {
			w = xdpplane.Scaled(w*100, b.scale)
		}
		ms = append(ms, balance.Member{Backend: b.b, Weight: w})
	}
	return ms, serving
}

// weightAt is b's weight with its agent's share, slow start and
// lag_weight applied: the agent's weight ramped, scaled down by the lag.
func (b *backend) weightAt(now time.Time, h *config.Health) uint32 {
	w := health.SlowStartWeight(b.agent.Scale(b.weight), b.upSince, now, h.SlowStart)
	return health.LagWeight(w, b.lag, h.LagWeight, h.MaxLag)
}

// Which backends of a VIP serve new flows.
const (
	servingPrimaries = "primaries"
	servingBackups   = "backups"
	servingNone      = "none"
)

// servingSet returns the eligible backends new flows go to, in file
// order, and which set they are: the primaries while any is eligible,
// else the backups (only the first eligible one with backup_mode
// "first"). Each set gets a table of its own from the snapshot built over
// it, so a failover and a failback each move flows once. With backup_mode
// "sticky" it is the one backend st chooses (st moves; nil: the first
// eligible one).
func servingSet(bs map[l4.BackendID]*backend, vc *config.VIP, st *stickyState) ([]*backend, string) {
	if vc.BackupMode == l4.BackupSticky {
		return stickySet(bs, vc, st)
	}
	var primaries, backups []*backend
	for _, bc := range vc.Backends {
		b, ok := bs[l4.BackendID(bc.ID())]
		if !ok || !b.eligible() {
			continue
		}
		if b.conf.Backup {
			backups = append(backups, b)
		} else {
			primaries = append(primaries, b)
		}
	}
	switch {
	case len(primaries) > 0:
		return primaries, servingPrimaries
	case len(backups) == 0:
		return nil, servingNone
	case vc.BackupMode == l4.BackupAll:
		return backups, servingBackups
	}
	return backups[:1], servingBackups
}

// stickySet is servingSet for backup_mode "sticky".
func stickySet(bs map[l4.BackendID]*backend, vc *config.VIP, st *stickyState) ([]*backend, string) {
	all := make([]l4.BackendID, 0, len(vc.Backends))
	var eligible []*backend
	for _, bc := range vc.Backends {
		id := l4.BackendID(bc.ID())
		b, ok := bs[id]
		if !ok {
			continue
		}
		all = append(all, id)
		if b.eligible() {
			eligible = append(eligible, b)
		}
	}
	b := st.choose(all, eligible)
	switch {
	case b == nil:
		return nil, servingNone
	case b.conf.Backup:
		return []*backend{b}, servingBackups
	}
	return []*backend{b}, servingPrimaries
}

// scalesWeights reports whether vc's algorithm runs as scaled Maglev
// weights (least_conn and least_time in xdp mode).
func scalesWeights(vc *config.VIP) bool {
	return vc.Mode == l4.ModeXDP && (vc.Algorithm == l4.LeastConn || vc.Algorithm == l4.LeastTime)
}

// rescale moves the scales of an xdp least_conn or least_time VIP one step
// toward the current live flows and RTTs, and publishes the new table
// when a weight changed. live returns a backend's live flows.
func (v *vip) rescale(live func(*l4.Backend) uint64) {
	vc := v.cfg()
	if !scalesWeights(vc) {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var order []*backend
	var in []xdpplane.WeightInput
	for _, b := range v.backends {
		if b.eligible() {
			rtt, _ := b.b.RTT().Value()
			order = append(order, b)
			in = append(in, xdpplane.WeightInput{Weight: b.weight, Live: live(b.b), RTT: rtt, Scale: b.scale})
		}
	}
	changed := false
	for i, s := range xdpplane.NextScales(vc.Algorithm, in, vc.LeastTimeBias, vc.LeastTimeDefault) {
		if b := order[i]; xdpplane.Scaled(b.weight*100, s) != xdpplane.Scaled(b.weight*100, b.scale) {
			b.scale, changed = s, true
		}
	}
	if changed {
		_ = v.rebuildLocked() // logged there
	}
}

func buildSnapshot(opts balance.Options, ms []balance.Member) (*snapshot.Snapshot, error) {
	return snapshot.Build(opts, ms)
}

// ConnectOK feeds the proxy's own handshake times to least_time (when it
// measures connect time; first_byte comes from the probes only).
func (v *vip) ConnectOK(b *l4.Backend, rtt time.Duration) {
	if rtt > 0 {
		b.ObserveRTT(rtt)
	}
	if v.trials.Load() > 0 && v.health != nil && v.onTrial(b) {
		v.health.PassiveSuccess(v.target(b.ID), 0)
	}
}

// onTrial reports whether b is on trial after an expired passive mark.
func (v *vip) onTrial(b *l4.Backend) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	rb, ok := v.backends[b.ID]
	return ok && rb.b == b && rb.trial
}

// ConnectFailed is a passive health mark: enough of them within
// fail_timeout take the backend out before its next probe.
func (v *vip) ConnectFailed(b *l4.Backend, err error) {
	if ce := v.log.Check(zap.DebugLevel, "backend connect failed"); ce != nil {
		ce.Write(zap.String("backend", string(b.ID)), zap.Error(err))
	}
	if v.health != nil && b.Eligible() {
		v.health.PassiveFailure(v.target(b.ID))
	}
}
