// The Runtime: running VIPs and the diff that a reload applies.

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/health"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/xdpplane"
)

// Runtime owns every running VIP.
type Runtime struct {
	log     *zap.Logger
	proxy   *proxy.Planes       // what the proxy-mode VIPs share: loops, pipes, budget
	indexes *xdpplane.IndexPool // backend indexes across all VIPs
	xdp     *xdpplane.Program   // the XDP program, once a config has xdp VIPs or XDP guards (guarded by mu)
	// xdpAt is xdp for the guards of proxy VIPs, which read it without mu.
	xdpAt  atomic.Pointer[xdpplane.Program]
	health *health.Manager
	// openPlane opens a VIP's data plane: newPlane (tests give a fake).
	openPlane openPlane

	names Names // the names of named backends; nil: none can be looked up
	// namesStop stops the goroutine that applies their answers (nil: none
	// runs); namesDone is closed when it has.
	namesStop, namesDone chan struct{}

	served *servedSignal // pokes ServingChanged

	// index maps a VIP key's string (health target names use it) to the
	// running VIP, for the health callback, which must not take mu.
	index atomic.Pointer[map[string]*vip]

	opts     Options
	applyMu  sync.Mutex // serialises Apply calls, also while one waits for DNS without mu
	mu       sync.Mutex // serialises Apply, Shutdown and Status
	cfg      *config.Config
	vips     map[l4.VIPKey]*vip
	draining sync.WaitGroup // VIPs removed by a reload, still draining
	// drainingVIPs are those VIPs, for status (guarded by mu).
	drainingVIPs map[*vip]struct{}
	closed       bool
	inherit      *ListenSockets // sockets from an earlier l4lb for the next Apply (see Inherit)
	carry        map[string]map[l4.BackendID]BackendState

	// modeChanges are the mode changes whose old plane still drains, by
	// VIP key (guarded by mu).
	modeChanges map[l4.VIPKey]*modeChange

	// changes are the operators' run-time backend changes and the file
	// they lie on (backendchange.go); stored under applyMu.
	changes atomic.Pointer[backendChanges]
}

// Options are a Runtime's process-wide settings.
type Options struct {
	PipeSize int // bytes per splice pipe; 0 = default
	// MaxConns caps proxied TCP connections across all VIPs (see
	// proxy.BudgetForFiles); 0 = no cap.
	MaxConns int
	// Workers is the number of event loops for proxied TCP connections
	// (0 = GOMAXPROCS).
	Workers int
	// Names looks up the names of named backends (names.New); nil: a
	// config with named backends is refused.
	Names Names
	// StateChanged, when set, is called after what a state file keeps
	// changed: a run-time backend change, an override, a health
	// transition. It must not block.
	StateChanged func()
}

// pipeCap is the cap on open splice pipes for a config: max_pipes when
// set, else half of MaxConns, which keeps two sockets per connection and
// two descriptors per pipe within the open-file limit the budget came
// from (0 = no cap when there is no budget either).
func (o Options) pipeCap(g config.Global) int {
	if g.MaxPipes > 0 {
		return g.MaxPipes
	}
	return o.MaxConns / 2
}

// New makes an empty Runtime; Apply gives it VIPs.
func New(log *zap.Logger, opts Options) *Runtime {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Runtime{log: log, opts: opts, vips: make(map[l4.VIPKey]*vip), drainingVIPs: map[*vip]struct{}{}, modeChanges: map[l4.VIPKey]*modeChange{},
		indexes: xdpplane.NewIndexPool(xdpplane.MaxBackends), names: opts.Names, served: newServedSignal()}
	r.proxy = proxy.NewPlanes(proxy.PlanesOptions{PipeSize: opts.PipeSize, MaxConns: opts.MaxConns, Workers: opts.Workers}, log)
	r.openPlane = r.newPlane
	r.health = health.NewManager(r.onHealth)
	r.startNames()
	r.publishIndex()
	return r
}

// publishIndex rebuilds the lock-free VIP index after vips changed.
func (r *Runtime) publishIndex() {
	idx := make(map[string]*vip, len(r.vips))
	for k, v := range r.vips {
		idx[k.String()] = v
		for _, rv := range v.routeVIPs() {
			idx[rv.id] = rv
		}
	}
	r.index.Store(&idx)
	r.served.poke()
}

func (r *Runtime) lookupVIP(key string) *vip { return (*r.index.Load())[key] }

// Config returns the config last applied.
func (r *Runtime) Config() *config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// Apply makes the running VIPs match cfg: new VIPs start, removed VIPs stop
// accepting and drain in the background, kept VIPs take the new settings
// and backends for new connections while established ones continue. If a
// new VIP cannot start, Apply changes nothing and returns the error.
// Run-time backend changes in force are laid over cfg, the file
// (backendchange.go).
func (r *Runtime) Apply(cfg *config.Config) error {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	return r.applyFile(cfg)
}

// applyLocked applies cfg as it is (applyMu held).
func (r *Runtime) applyLocked(cfg *config.Config) error {
	if err := r.watchNames(cfg); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.closeInherited()
	if r.names != nil {
		defer func() { r.names.Prune(r.cfg) }()
	}
	if r.closed {
		return errors.New("runtime is shut down")
	}
	ch, err := r.prepare(cfg)
	if err != nil {
		return err
	}
	r.commit(cfg, ch)
	return nil
}

// watchNames starts watching the names of cfg's named backends and waits
// for new names' first answers, without mu (applyMu keeps Applies in
// order meanwhile). Names the config in force after this Apply (cfg, or
// the old one when refused) does not use are let go by Apply's end.
func (r *Runtime) watchNames(cfg *config.Config) error {
	r.mu.Lock()
	if r.closed {
		r.closeInherited()
		r.mu.Unlock()
		return errors.New("runtime is shut down")
	}
	if r.names == nil && hasNamed(cfg) {
		r.closeInherited()
		r.mu.Unlock()
		return errors.New("named backends need a resolver (reconcile.Options.Names)")
	}
	wait := func() {}
	if r.names != nil {
		wait = r.names.Watch(cfg)
	}
	r.mu.Unlock()
	wait()
	return nil
}

// change is what one Apply does to the running VIPs, decided before any
// of it is done.
type change struct {
	desired map[l4.VIPKey]*config.VIP
	// moved: VIPs whose mode changes; they get a new data plane (they
	// start anew) and the old one keeps its established flows while they
	// drain (modechange.go).
	moved   map[l4.VIPKey]bool
	plans   map[l4.VIPKey]*plan // running VIPs that stay, with their update
	started []*vip              // new VIPs, listening but not serving yet
}

// prepare does everything of an Apply that can fail: it plans each
// running VIP's update, checks forwarding, loads the XDP program and
// opens the new VIPs. On an error nothing has changed.
func (r *Runtime) prepare(cfg *config.Config) (*change, error) {
	ch := &change{desired: make(map[l4.VIPKey]*config.VIP, len(cfg.VIPs)), moved: map[l4.VIPKey]bool{}, plans: map[l4.VIPKey]*plan{}}
	for i := range cfg.VIPs {
		ch.desired[cfg.VIPs[i].Key()] = r.expand(&cfg.VIPs[i])
	}
	abandon := func() {
		for _, p := range ch.plans {
			p.abandon(r.indexes)
		}
	}
	for key, vc := range ch.desired {
		v, ok := r.vips[key]
		if ok && v.cfg().Mode != vc.Mode {
			ch.moved[key] = true
		}
		if !ok || ch.moved[key] {
			r.endModeChange(key) // the plane an earlier change left must not outlive a new one
		}
	}
	for key, vc := range ch.desired {
		if v, ok := r.vips[key]; ok && !ch.moved[key] {
			p, err := v.plan(vc)
			if err != nil {
				abandon()
				return nil, fmt.Errorf("vip %q: %w", vc.Name, err)
			}
			ch.plans[key] = p
		}
	}
	if err := r.proxy.RefreshLocal(); err != nil {
		r.log.Warn("cannot list local addresses; backends that loop into l4lb are caught only after connecting", zap.Error(err))
	}
	if err := r.checkForwarding(cfg, ch.desired); err != nil {
		abandon()
		return nil, err
	}
	if err := r.ensureXDP(cfg); err != nil {
		abandon()
		return nil, err
	}
	attached, err := r.attachInterfaces(cfg)
	if err != nil {
		abandon()
		return nil, err
	}
	started, err := r.startNew(ch.desired, ch.moved)
	if err != nil {
		if len(attached) > 0 {
			r.xdp.DetachInterfaces(attached)
		}
		abandon()
		return nil, err
	}
	ch.started = started
	return ch, nil
}

// commit carries out a prepared change; nothing in it fails. VIPs that
// leave drain, running ones take their plans, new ones serve (their
// routes set first: the first client is routed), then health follows
// the new backend sets and the process-wide settings take effect.
func (r *Runtime) commit(cfg *config.Config, ch *change) {
	for _, v := range ch.started {
		if ch.moved[v.key] {
			r.changeMode(v.key, r.vips[v.key], v, cfg.Global.DrainTimeout)
		}
	}
	for key, v := range r.vips {
		if _, keep := ch.desired[key]; !keep {
			r.remove(key, v, cfg.Global.DrainTimeout)
		}
	}
	var routeHealth []func()
	for key, p := range ch.plans {
		r.vips[key].apply(p)
		r.syncHealth(r.vips[key], p.removed)
		routeHealth = append(routeHealth, r.applyRoutes(r.vips[key], p.conf))
	}
	for _, v := range ch.started {
		r.vips[v.key] = v
		routeHealth = append(routeHealth, r.applyRoutes(v, v.cfg()))
		v.serve()
		r.log.Info("vip started", zap.String("vip", v.name()), zap.Stringer("listen", v.key), zap.Int("backends", len(v.cfg().Backends)))
	}
	r.publishIndex()
	for _, v := range ch.started {
		r.syncHealth(v, nil)
	}
	for _, sync := range routeHealth {
		sync()
	}
	r.proxy.Configure(r.opts.pipeCap(cfg.Global), cfg.Global.BusyPoll)
	if r.xdp != nil {
		r.xdp.Settle()
		if cfg.XDP != nil {
			r.xdp.Update(xdpOptions(cfg.XDP))
		}
	}
	r.cfg = cfg
}

// startNew opens the VIPs that do not run yet, and those whose mode moves.
// On failure it closes what it opened and returns the error.
func (r *Runtime) startNew(desired map[l4.VIPKey]*config.VIP, moved map[l4.VIPKey]bool) ([]*vip, error) {
	var started []*vip
	for key, vc := range desired {
		if _, ok := r.vips[key]; ok && !moved[key] {
			continue
		}
		v, err := r.newVIP(key, vc, moved[key] && inheritsFlows(r.vips[key]))
		if err != nil {
			for _, s := range started {
				s.closeNow()
			}
			return nil, fmt.Errorf("vip %q: %w", vc.Name, err)
		}
		started = append(started, v)
	}
	return started, nil
}

func (r *Runtime) remove(key l4.VIPKey, v *vip, drain time.Duration) {
	r.detach(key, v, "a reload removed the VIP")
	r.log.Info("vip removed, draining", zap.String("vip", v.name()), zap.Stringer("listen", key), zap.Duration("drain_timeout", drain))
	// The listener closes now, not in the drain goroutine, so a reload that
	// brings the VIP back can bind its address at once.
	v.stopAccepting()
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	r.drainLater(v, ctx, func(reset int) {
		cancel()
		r.log.Info("vip drained", zap.String("vip", v.name()), zap.Int("reset", reset))
	})
}

// detach takes v, leaving, out of the running VIPs: its health checks,
// rebalance and routes stop. why is what a running rebalance hears.
func (r *Runtime) detach(key l4.VIPKey, v *vip, why string) {
	delete(r.vips, key)
	v.stopRebalance(why)
	v.mu.Lock()
	ids := make([]l4.BackendID, 0, len(v.backends))
	for id := range v.backends {
		ids = append(ids, id)
	}
	v.mu.Unlock()
	// Remove waits for the probe loop, which may be reporting into this
	// VIP's lock: never call it holding v.mu.
	for _, id := range ids {
		r.health.Remove(v.target(id))
	}
	for _, rv := range v.routeVIPs() {
		r.stopRoute(rv)
	}
}

// drainLater drains v, which accepts nothing any more, in the background
// until ctx is done; status lists it as draining meanwhile. done runs
// with the flows it reset once the drain ends, without r.mu.
func (r *Runtime) drainLater(v *vip, ctx context.Context, done func(reset int)) {
	r.draining.Add(1)
	r.drainingVIPs[v] = struct{}{}
	go func() {
		defer r.draining.Done()
		done(v.drain(ctx))
		r.mu.Lock()
		delete(r.drainingVIPs, v)
		if m := r.modeChanges[v.key]; m != nil && m.old == v {
			delete(r.modeChanges, v.key)
		}
		r.mu.Unlock()
	}()
}

// ensureXDP loads and attaches the XDP program when cfg is the first
// config with xdp VIPs, or with an [xdp] table whose guards have work for
// proxy VIPs (syn_rate_per_source, allow/deny). It stays until Shutdown,
// also when a reload removes the last xdp VIP; a reload cannot move it
// (its [xdp] keys but syn_rate_per_source need a restart).
func (r *Runtime) ensureXDP(cfg *config.Config) error {
	if r.xdp != nil || !cfg.AttachesXDP() {
		return nil
	}
	if cfg.XDP == nil {
		return fmt.Errorf("xdp VIPs need an [xdp] table")
	}
	x, err := xdpplane.Start(xdpOptions(cfg.XDP), r.indexes, r.log)
	if err != nil {
		return err
	}
	r.xdp = x
	r.xdpAt.Store(x)
	x.Run(r.rescaleXDP)
	return nil
}

// checkForwarding refuses a config whose ipip xdp VIPs need forwarding
// that an XDP interface (cfg's, or the running ones when cfg has no
// [xdp]) lacks.
func (r *Runtime) checkForwarding(cfg *config.Config, desired map[l4.VIPKey]*config.VIP) error {
	switch {
	case cfg.XDP != nil && (r.xdp != nil || cfg.HasXDPVIP()):
		return checkXDPForwarding(cfg.XDP.Interfaces, desired)
	case r.xdp != nil:
		return checkXDPForwarding(r.xdp.Interfaces(), desired)
	}
	return nil
}

// attachInterfaces attaches the running XDP program to the interfaces
// cfg adds (a reload); commit detaches those it drops (Program.Update).
func (r *Runtime) attachInterfaces(cfg *config.Config) ([]string, error) {
	if r.xdp == nil || cfg.XDP == nil {
		return nil, nil
	}
	return r.xdp.AttachInterfaces(cfg.XDP.Interfaces)
}

// rescaleXDP moves the weights of xdp least_conn and least_time VIPs
// toward their backends' live flows and RTTs. It runs on the XDP loop and
// reads the VIPs through the lock-free index.
func (r *Runtime) rescaleXDP() {
	live := func(b *l4.Backend) uint64 { return r.xdp.LiveFlows(b.Index) }
	for _, v := range *r.index.Load() {
		v.rescale(live)
	}
}

// Shutdown stops accepting on every VIP, waits for connections to finish
// until ctx is done, then resets the rest. Status lists the VIPs that
// drain, as draining, until each is done.
func (r *Runtime) Shutdown(ctx context.Context) {
	r.mu.Lock()
	r.closed = true
	vips := r.vips
	r.vips = map[l4.VIPKey]*vip{}
	r.publishIndex()
	stop, done := r.namesStop, r.namesDone
	r.namesStop = nil
	r.mu.Unlock()
	r.stopNames(stop, done)
	r.health.Close()
	for _, v := range vips {
		v.stopRebalance("l4lb is shutting down") // before the loops it asks stop
	}
	var wg sync.WaitGroup
	for k, v := range vips {
		if v.dp.OutlivesProcess() {
			delete(vips, k) // left forwarding for the next l4lb to adopt
			continue
		}
		v.stopAccepting()
	}
	r.mu.Lock()
	for _, v := range vips {
		r.drainingVIPs[v] = struct{}{}
	}
	r.mu.Unlock()
	for _, v := range vips {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g, ok := v.dp.(plane.Goodbye); ok {
				g.SayGoodbye(true) // app_protocol: at boundaries; WebSocket clients hear 1012
			}
			if n := v.drain(ctx); n > 0 {
				r.log.Warn("connections reset at drain timeout", zap.String("vip", v.name()), zap.Int("reset", n))
			}
			r.mu.Lock()
			delete(r.drainingVIPs, v)
			r.mu.Unlock()
		}()
	}
	wg.Wait()
	r.draining.Wait()
	r.proxy.Close()
	if r.xdp != nil {
		r.xdp.Shutdown()
	}
}
