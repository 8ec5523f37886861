// One running VIP: its service, its backends by identity, its snapshot.
package reconcile

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// vip is a running virtual service.
type vip struct {
	key   l4.VIPKey
	log   *zap.Logger
	flows l4.FlowCounter // VIP-wide live flows (bounded-load hashing reads it)
	store snapshot.Store
	tcp   *proxy.TCPService // set for TCP VIPs
	udp   *proxy.UDPService // set for UDP VIPs

	conf atomic.Pointer[config.VIP]

	mu       sync.Mutex // guards backends and snapshot rebuilds
	backends map[l4.BackendID]*backend
}

// backend is a backend as the runtime tracks it.
type backend struct {
	b      *l4.Backend
	weight uint32
	health l4.Health
}

// plan is a VIP's next backend set and snapshot, built before anything
// running changes.
type plan struct {
	conf     *config.VIP
	backends map[l4.BackendID]*backend
	snap     *snapshot.Snapshot
}

func newVIP(key l4.VIPKey, vc *config.VIP, pipes *proxy.PipePool, log *zap.Logger) (*vip, error) {
	v := &vip{key: key, log: log.With(zap.String("vip", vc.Name)), backends: map[l4.BackendID]*backend{}}
	p, err := v.plan(vc)
	if err != nil {
		return nil, err
	}
	var err2 error
	if key.Proto == l4.TCP {
		err2 = v.startTCP(vc, pipes)
	} else {
		err2 = v.startUDP(vc)
	}
	if err2 != nil {
		return nil, err2
	}
	v.commit(p)
	return v, nil
}

func (v *vip) startTCP(vc *config.VIP, pipes *proxy.PipePool) error {
	st := settings(vc)
	ln, err := proxy.ListenTCP(v.key.Addr, keepAliveFor(st))
	if err != nil {
		return err
	}
	v.tcp = proxy.NewTCPService(proxy.TCPConfig{
		Listener: ln, Snapshots: &v.store, Pipes: pipes, Settings: st,
		Log: v.log, Observer: v,
	})
	return nil
}

func (v *vip) startUDP(vc *config.VIP) error {
	conn, err := proxy.ListenUDP(v.key.Addr)
	if err != nil {
		return err
	}
	v.udp, err = proxy.NewUDPService(proxy.UDPConfig{
		Conn: conn, Snapshots: &v.store, Settings: udpSettings(vc), Log: v.log, Observer: v,
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
	if v.tcp != nil {
		_ = v.tcp.Close()
	}
}

func (v *vip) closeNow() {
	if v.tcp != nil {
		_ = v.tcp.Close()
	} else {
		_ = v.udp.Close()
	}
}

// drain lets TCP connections finish until ctx is done and returns how many
// were reset. UDP sessions have no end to wait for: they end at once.
func (v *vip) drain(ctx context.Context) int {
	if v.tcp != nil {
		return v.tcp.Drain(ctx)
	}
	n := int(v.udp.Sessions())
	_ = v.udp.Close()
	return n
}

// apply switches the running VIP to a plan made by plan.
func (v *vip) apply(p *plan) {
	if v.tcp != nil {
		v.tcp.Update(settings(p.conf))
	} else {
		v.udp.Update(udpSettings(p.conf))
	}
	v.commit(p)
}

// plan builds the backend set for vc, keeping the l4.Backend of every
// backend whose identity and address are unchanged (its live counts and
// RTT estimate carry over), and the snapshot over it.
func (v *vip) plan(vc *config.VIP) (*plan, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	next := make(map[l4.BackendID]*backend, len(vc.Backends))
	for _, bc := range vc.Backends {
		id := l4.BackendID(bc.ID())
		old, ok := v.backends[id]
		nb := &backend{weight: uint32(bc.Weight)}
		if ok && old.b.Addr == bc.Address {
			nb.b, nb.health = old.b, old.health
		} else {
			nb.b = l4.NewBackend(id, bc.Address, &v.flows)
		}
		nb.b.RTT().SetAlpha(vc.LeastTimeAlpha)
		next[id] = nb
	}
	opts, err := balanceOptions(vc)
	if err != nil {
		return nil, err
	}
	snap, err := snapshot.Build(opts, eligible(next))
	if err != nil {
		return nil, err
	}
	return &plan{conf: vc, backends: next, snap: snap}, nil
}

func (v *vip) commit(p *plan) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for id, old := range v.backends {
		if nb, ok := p.backends[id]; !ok || nb.b != old.b {
			old.b.SetEligible(false) // removed: pinned flows move on their next packet
		}
	}
	for _, b := range p.backends {
		b.b.SetEligible(b.eligible())
	}
	v.backends = p.backends
	v.conf.Store(p.conf)
	v.store.Store(p.snap)
}

// eligible reports whether new flows may go to b.
func (b *backend) eligible() bool { return b.weight > 0 && b.health != l4.HealthDown }

// eligible lists the backends new flows may go to.
func eligible(bs map[l4.BackendID]*backend) []balance.Member {
	ms := make([]balance.Member, 0, len(bs))
	for _, b := range bs {
		if b.eligible() {
			ms = append(ms, balance.Member{Backend: b.b, Weight: b.weight})
		}
	}
	return ms
}

// ConnectOK feeds the proxy's own handshake times to least_time.
func (v *vip) ConnectOK(b *l4.Backend, rtt time.Duration) { b.ObserveRTT(rtt) }

// ConnectFailed is a passive health mark.
func (v *vip) ConnectFailed(b *l4.Backend, err error) {
	if ce := v.log.Check(zap.DebugLevel, "backend connect failed"); ce != nil {
		ce.Write(zap.String("backend", string(b.ID)), zap.Error(err))
	}
}
