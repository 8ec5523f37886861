// One running VIP: its service, its backends by identity, its snapshot.
package reconcile

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/health"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// vip is a running virtual service.
type vip struct {
	key    l4.VIPKey
	log    *zap.Logger
	health *health.Manager
	flows  l4.FlowCounter // VIP-wide live flows (bounded-load hashing reads it)
	store  snapshot.Store
	tcp    *proxy.TCPService // set for TCP VIPs
	udp    *proxy.UDPService // set for UDP VIPs
	self   *proxy.Listeners  // the process's listeners, which this VIP joins while it listens

	conf    atomic.Pointer[config.VIP]
	ramping atomic.Bool // a slow-start goroutine runs
	stopped atomic.Bool
	trials  atomic.Int32 // backends on trial (see backend.trial): ConnectOK looks only when > 0

	mu       sync.Mutex // guards backends, retired and snapshot rebuilds
	backends map[l4.BackendID]*backend
	// retired are backends a reload removed that still hold flows: status
	// shows them until their last flow ends.
	retired []*backend
}

// backend is a backend as the runtime tracks it.
type backend struct {
	b       *l4.Backend
	weight  uint32
	health  l4.Health
	upSince time.Time // when it last came back up (slow start ramps from here)
	// trial: a passive mark expired (health type none); the next connect
	// or reply the proxy sees decides, and ConnectOK reports it.
	trial bool
}

// eligible reports whether new flows may go to b.
func (b *backend) eligible() bool { return b.weight > 0 && b.health != l4.HealthDown }

// plan is a VIP's next backend set and snapshot, built before anything
// running changes.
type plan struct {
	conf     *config.VIP
	backends map[l4.BackendID]*backend
	snap     *snapshot.Snapshot
	removed  []l4.BackendID
}

func newVIP(key l4.VIPKey, vc *config.VIP, pipes *proxy.PipePool, budget *proxy.ConnBudget, self *proxy.Listeners, hm *health.Manager, log *zap.Logger) (*vip, error) {
	v := &vip{key: key, log: log.With(zap.String("vip", vc.Name)), health: hm, self: self, backends: map[l4.BackendID]*backend{}}
	p, err := v.plan(vc)
	if err != nil {
		return nil, err
	}
	if key.Proto == l4.TCP {
		err = v.startTCP(vc, pipes, budget)
	} else {
		err = v.startUDP(vc)
	}
	if err != nil {
		return nil, err
	}
	self.Add(key)
	v.commit(p)
	return v, nil
}

func (v *vip) startTCP(vc *config.VIP, pipes *proxy.PipePool, budget *proxy.ConnBudget) error {
	st := settings(vc)
	ln, err := proxy.ListenTCP(v.key.Addr, proxy.ListenOptions{KeepAlive: keepAliveFor(st), Freebind: vc.Freebind})
	if err != nil {
		return err
	}
	v.tcp = proxy.NewTCPService(proxy.TCPConfig{
		Listener: ln, Snapshots: &v.store, Pipes: pipes, Settings: st,
		Log: v.log, Observer: v, Budget: budget, Self: v.self,
	})
	return nil
}

func (v *vip) startUDP(vc *config.VIP) error {
	conn, err := proxy.ListenUDP(v.key.Addr, proxy.ListenOptions{Freebind: vc.Freebind})
	if err != nil {
		return err
	}
	v.udp, err = proxy.NewUDPService(proxy.UDPConfig{
		Conn: conn, Snapshots: &v.store, Settings: udpSettings(vc), Log: v.log, Observer: v, Self: v.self,
	})
	if err != nil {
		conn.Close()
	}
	return err
}

func (v *vip) name() string     { return v.conf.Load().Name }
func (v *vip) cfg() *config.VIP { return v.conf.Load() }

func (v *vip) serve() {
	if v.tcp != nil {
		go v.tcp.Serve()
	} else {
		go v.udp.Serve()
	}
}

// stopAccepting closes the listener of a TCP VIP; a UDP VIP stops at drain.
func (v *vip) stopAccepting() {
	v.stopped.Store(true)
	if v.tcp != nil {
		v.self.Remove(v.key)
		_ = v.tcp.Close()
	}
}

func (v *vip) closeNow() {
	v.stopped.Store(true)
	v.self.Remove(v.key)
	if v.tcp != nil {
		_ = v.tcp.Close()
	} else {
		_ = v.udp.Close()
	}
}

// drain lets TCP connections finish until ctx is done and returns how many
// were reset. UDP sessions have nothing to finish: they end at once.
func (v *vip) drain(ctx context.Context) int {
	v.stopped.Store(true)
	if v.tcp != nil {
		return v.tcp.Drain(ctx)
	}
	v.self.Remove(v.key)
	_ = v.udp.Close()
	return 0
}

// apply switches the running VIP to a plan made by plan.
func (v *vip) apply(p *plan) {
	if v.tcp != nil {
		v.tcp.Update(settings(p.conf))
	} else {
		if err := v.udp.Update(udpSettings(p.conf)); err != nil {
			v.log.Error("udp settings not applied", zap.Error(err))
		}
	}
	v.commit(p)
}

// plan builds the backend set for vc, keeping the l4.Backend of every
// backend whose identity and address are unchanged (its live counts, RTT
// estimate and health carry over), and the snapshot over it.
func (v *vip) plan(vc *config.VIP) (*plan, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	next := make(map[l4.BackendID]*backend, len(vc.Backends))
	for _, bc := range vc.Backends {
		id := l4.BackendID(bc.ID())
		old, ok := v.backends[id]
		nb := &backend{weight: uint32(bc.Weight)}
		if ok && old.b.Addr == bc.Address {
			nb.b, nb.health, nb.upSince, nb.trial = old.b, old.health, old.upSince, old.trial
		} else {
			nb.b = l4.NewBackend(id, bc.Address, &v.flows)
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
	if err != nil {
		return nil, err
	}
	snap, err := buildSnapshot(opts, effectiveMembers(next, vc.Health.SlowStart, time.Now()))
	if err != nil {
		return nil, err
	}
	return &plan{conf: vc, backends: next, snap: snap, removed: removed}, nil
}

// commit publishes a plan. Health that changed since the plan was made
// wins, and then the snapshot is rebuilt from it.
func (v *vip) commit(p *plan) {
	v.mu.Lock()
	defer v.mu.Unlock()
	stale := false
	for id, old := range v.backends {
		nb, ok := p.backends[id]
		if !ok || nb.b != old.b {
			old.b.SetEligible(false) // removed: pinned flows move on their next packet
			if old.b.LiveFlows() > 0 {
				v.retired = append(v.retired, old)
			}
			continue
		}
		if nb.health != old.health || nb.trial != old.trial {
			nb.health, nb.upSince, nb.trial, stale = old.health, old.upSince, old.trial, true
		}
	}
	trials := int32(0)
	for _, b := range p.backends {
		if b.trial {
			trials++
		}
	}
	v.trials.Store(trials)
	for _, b := range p.backends {
		b.b.SetEligible(b.eligible())
	}
	v.backends = p.backends
	v.conf.Store(p.conf)
	v.store.Store(p.snap)
	if stale {
		v.rebuildLocked()
	}
}

// effective lists the members new flows may go to, with slow-start weights.
func (v *vip) effective(now time.Time) []balance.Member {
	return effectiveMembers(v.backends, v.cfg().Health.SlowStart, now)
}

func effectiveMembers(bs map[l4.BackendID]*backend, slowStart time.Duration, now time.Time) []balance.Member {
	ms := make([]balance.Member, 0, len(bs))
	for _, b := range bs {
		if b.eligible() {
			w := health.SlowStartWeight(b.weight, b.upSince, now, slowStart)
			ms = append(ms, balance.Member{Backend: b.b, Weight: w})
		}
	}
	return ms
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
