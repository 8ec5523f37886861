// SNI routes: each [[vip.route]] of a tcp proxy VIP runs as a VIP without
// a listener (its own backends, snapshot store, health targets, passive
// marks), and the VIP's proxy service gets a table from server names to
// their stores.

package reconcile

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// sniRoute is one running route of a VIP.
type sniRoute struct {
	v  *vip         // the route's backends, snapshot and health
	pr *proxy.Route // what the proxy service picks from; kept across reloads (its counter goes on)
}

// routeConfig is a route as a VIP of its own: the VIP's settings with the
// route's backends, algorithm and health.
func routeConfig(vc *config.VIP, rc *config.Route) *config.VIP {
	c := *vc
	c.Name = vc.Name + "/" + rc.Name
	c.Algorithm, c.Health, c.Backends, c.Routes = rc.Algorithm, rc.Health, rc.Backends, nil
	return &c
}

// routeID is the health and index key of route name of the VIP at key.
func routeID(key l4.VIPKey, name string) string { return key.String() + "#route=" + name }

// newRouteVIP starts the listener-less VIP of one route of parent.
func newRouteVIP(parent *vip, rc *config.VIP, name string, svc *proxy.TCPService) (*vip, error) {
	v := &vip{key: parent.key, id: routeID(parent.key, name), log: parent.log.With(zap.String("route", name)), health: parent.health,
		self: parent.self, indexes: parent.indexes, served: parent.served, backends: map[l4.BackendID]*backend{}}
	v.dp = routePlane{svc: svc}
	p, err := v.plan(rc)
	if err != nil {
		return nil, err
	}
	if err := v.commit(p); err != nil {
		p.abandon(v.indexes)
		return nil, err
	}
	return v, nil
}

// syncRoutes makes v's routes match vc: new routes start, kept ones take
// their new backends (established connections keep theirs), removed ones
// stop; then the proxy service gets the new table. It returns each
// route's backends that a plan removed (for their health targets) and
// the routes that stopped.
func (v *vip) syncRoutes(vc *config.VIP) (removed map[*vip][]l4.BackendID, stopped []*vip, err error) {
	tp, ok := v.dp.(*tcpPlane)
	if !ok {
		return nil, nil, nil
	}
	next := make(map[string]*sniRoute, len(vc.Routes))
	removed = map[*vip][]l4.BackendID{}
	for i := range vc.Routes {
		rc := &vc.Routes[i]
		conf := routeConfig(vc, rc)
		if old, ok := v.routes[rc.Name]; ok {
			p, perr := old.v.plan(conf)
			if perr != nil {
				err = fmt.Errorf("route %q: %w", rc.Name, perr)
				next[rc.Name] = old // keeps its backends
				continue
			}
			old.v.apply(p)
			removed[old.v] = p.removed
			next[rc.Name] = old
			continue
		}
		rv, nerr := newRouteVIP(v, conf, rc.Name, tp.svc)
		if nerr != nil {
			err = fmt.Errorf("route %q: %w", rc.Name, nerr)
			continue
		}
		next[rc.Name] = &sniRoute{v: rv, pr: &proxy.Route{Name: rc.Name, Snapshots: &rv.store, Observer: rv}}
		removed[rv] = nil
	}
	for name, old := range v.routes {
		if _, keep := next[name]; !keep {
			old.v.stopped.Store(true)
			stopped = append(stopped, old.v)
		}
	}
	v.routes = next
	tp.svc.SetRoutes(v.routeTable(vc))
	return removed, stopped, err
}

// routeTable builds the proxy's table over v's routes (nil: none).
func (v *vip) routeTable(vc *config.VIP) *proxy.Routes {
	if len(v.routes) == 0 {
		return nil
	}
	var prs []*proxy.Route
	var names [][]string
	for i := range vc.Routes {
		if r, ok := v.routes[vc.Routes[i].Name]; ok {
			prs = append(prs, r.pr)
			names = append(names, vc.Routes[i].Names)
		}
	}
	t, err := proxy.NewRoutes(prs, names, vc.SNITimeout, vc.SNINoMatch)
	if err != nil { // config validation refuses duplicates first
		v.log.Error("SNI routes not applied", zap.Error(err))
		return nil
	}
	return t
}

// routeVIPs lists v's route VIPs.
func (v *vip) routeVIPs() []*vip {
	out := make([]*vip, 0, len(v.routes))
	for _, r := range v.routes {
		out = append(out, r.v)
	}
	return out
}

// applyRoutes syncs v's routes after a start or a reload; a route that
// could not start is logged (the VIP's other routes and its own backends
// run). It returns the health sync of the routes, to run once the index
// holds them (a probe's report must find its route).
func (r *Runtime) applyRoutes(v *vip, vc *config.VIP) func() {
	removed, stopped, err := v.syncRoutes(vc)
	if err != nil {
		r.log.Error("SNI route not started", zap.String("vip", vc.Name), zap.Error(err))
	}
	for _, rv := range stopped {
		r.stopRoute(rv)
	}
	return func() {
		for rv, ids := range removed {
			r.syncHealth(rv, ids)
		}
	}
}

// stopRoute ends a route's health targets; its established connections
// go on with the backends they have.
func (r *Runtime) stopRoute(rv *vip) {
	rv.stopped.Store(true)
	rv.mu.Lock()
	ids := make([]l4.BackendID, 0, len(rv.backends))
	for id := range rv.backends {
		ids = append(ids, id)
	}
	rv.mu.Unlock()
	for _, id := range ids {
		r.health.Remove(rv.target(id))
	}
	rv.releaseIndexes()
}

// routePlane is a route's side of the VIP's proxy service: connections
// are the service's, the route only chose their backends.
type routePlane struct{ svc *proxy.TCPService }

func (routePlane) serve() {}

// publish: the service reads the route's store; a new snapshot may have
// room for connections of the route waiting for a backend slot.
func (p routePlane) publish(*snapshot.Snapshot) error { p.svc.ServeQueue(); return nil }
func (routePlane) update(*config.VIP) error           { return nil }
func (routePlane) stopAccepting()                     {}
func (routePlane) drain(context.Context) int          { return 0 } // the VIP's drain covers its connections
func (routePlane) closeNow()                          {}
func (p routePlane) resetWhere(m func(*l4.Backend) bool, why l4.EndReason) int {
	return p.svc.ResetWhere(m, why)
}
func (p routePlane) closeSome(b *l4.Backend, n int, how proxy.CloseHow) (int, error) {
	return p.svc.CloseSome(b, n, how), nil
}
func (routePlane) backendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	releaseAll(bs, release)
}
func (routePlane) backendDown(*l4.Backend) {}
func (routePlane) outlivesProcess() bool   { return false }
func (routePlane) fillStatus(*VIPStatus)   {}
func (routePlane) explain(q *explainQuery) {}

// RouteStatus is one SNI route of a VIP in status.
type RouteStatus struct {
	Name      string          `json:"name"`
	Names     []string        `json:"names"`
	Algorithm string          `json:"algorithm"`
	Eligible  int             `json:"eligible"`
	Routed    uint64          `json:"routed"` // connections its names brought
	Backends  []BackendStatus `json:"backends"`
}

// SNIStatus is a VIP's SNI routing: its routes and what matched none.
type SNIStatus struct {
	Timeout time.Duration `json:"timeout_ns"`
	NoMatch string        `json:"no_match"` // default | close
	Routes  []RouteStatus `json:"routes"`
	// Connections the VIP's own backends took for want of a route.
	Default uint64 `json:"default"`
	// Clients with a name no route lists or no name; not TLS or
	// malformed; no whole ClientHello within sni_timeout (reset).
	NoMatchCount uint64 `json:"sni_no_match"`
	NotTLS       uint64 `json:"sni_not_tls"`
	Timeouts     uint64 `json:"sni_timeout"`
}

// sniStatus fills the routes of v's status (r.mu held).
func (r *Runtime) sniStatus(v *vip, s *VIPStatus) {
	vc := v.cfg()
	tp, ok := v.dp.(*tcpPlane)
	if len(vc.Routes) == 0 || !ok {
		return
	}
	st := &tp.svc.Stats
	sni := &SNIStatus{Timeout: vc.SNITimeout, NoMatch: vc.SNINoMatch.String(), Default: st.SNIDefault.Load(),
		NoMatchCount: st.SNINoMatch.Load(), NotTLS: st.SNINotTLS.Load(), Timeouts: st.SNITimeouts.Load()}
	for i := range vc.Routes {
		rt, ok := v.routes[vc.Routes[i].Name]
		if !ok {
			continue
		}
		rs := rt.v.status()
		for j := range rs.Backends {
			if !rs.Backends[j].Removed {
				r.healthStatus(rt.v, &rs.Backends[j])
			}
		}
		sni.Routes = append(sni.Routes, RouteStatus{Name: vc.Routes[i].Name, Names: vc.Routes[i].Names, Algorithm: rs.Algorithm,
			Eligible: rs.Eligible, Routed: rt.pr.Routed.Load(), Backends: rs.Backends})
	}
	s.SNI = sni
}
