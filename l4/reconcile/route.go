// SNI routes: each [[vip.route]] of a tcp proxy VIP runs as a VIP without
// a listener (its own backends, snapshot store, health targets, passive
// marks), and the VIP's plane (a plane.Router) gets a table from server
// names (on a postgres VIP also databases and users) to their stores.

package reconcile

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

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
func newRouteVIP(parent *vip, rc *config.VIP, name string, router plane.Router) (*vip, error) {
	v := &vip{key: parent.key, id: routeID(parent.key, name), log: parent.log.With(zap.String("route", name)), health: parent.health,
		indexes: parent.indexes, served: parent.served, backends: map[l4.BackendID]*backend{}}
	v.dp, v.update = router.RoutePlane(), func(*config.VIP) error { return nil }
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
	router, ok := v.dp.(plane.Router)
	if !ok {
		return nil, nil, nil
	}
	next := make(map[string]*vip, len(vc.Routes))
	removed = map[*vip][]l4.BackendID{}
	for i := range vc.Routes {
		rc := &vc.Routes[i]
		conf := routeConfig(vc, rc)
		if old, ok := v.routes[rc.Name]; ok {
			p, perr := old.plan(conf)
			if perr != nil {
				err = fmt.Errorf("route %q: %w", rc.Name, perr)
				next[rc.Name] = old // keeps its backends
				continue
			}
			old.apply(p)
			removed[old] = p.removed
			next[rc.Name] = old
			continue
		}
		rv, nerr := newRouteVIP(v, conf, rc.Name, router)
		if nerr != nil {
			err = fmt.Errorf("route %q: %w", rc.Name, nerr)
			continue
		}
		next[rc.Name] = rv
		removed[rv] = nil
	}
	for name, old := range v.routes {
		if _, keep := next[name]; !keep {
			old.stopped.Store(true)
			stopped = append(stopped, old)
		}
	}
	v.routes = next
	if terr := router.SetRoutes(v.routeTable(vc)); terr != nil { // config validation refuses duplicates first
		v.log.Error("SNI routes not applied", zap.Error(terr))
	}
	return removed, stopped, err
}

// routeTable is the table of v's routes (nil: none).
func (v *vip) routeTable(vc *config.VIP) *plane.RouteTable {
	if len(v.routes) == 0 {
		return nil
	}
	t := &plane.RouteTable{Timeout: vc.SNITimeout, CloseNoMatch: vc.SNINoMatch == l4.SNINoMatchClose, Startup: vc.AppProtocol == l4.AppPostgres}
	for i := range vc.Routes {
		rc := &vc.Routes[i]
		if rv, ok := v.routes[rc.Name]; ok {
			t.Routes = append(t.Routes, plane.Route{Name: rc.Name, Names: rc.Names, Databases: rc.Databases, Users: rc.Users, Snapshots: &rv.store, Observer: rv})
		}
	}
	return t
}

// routeVIPs lists v's route VIPs.
func (v *vip) routeVIPs() []*vip {
	out := make([]*vip, 0, len(v.routes))
	for _, rv := range v.routes {
		out = append(out, rv)
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

// explainRoutes lists v's routes and what each takes in e (explain sees
// no client bytes: its answer is the default route's); r.mu held.
func (v *vip) explainRoutes(vc *config.VIP, e *plane.Explanation) {
	for i := range vc.Routes {
		rc := &vc.Routes[i]
		if rv, ok := v.routes[rc.Name]; ok {
			e.Routes = append(e.Routes, plane.RouteMatch{Name: rc.Name, Names: rc.Names, Databases: rc.Databases, Users: rc.Users, Eligible: rv.store.Load().Len()})
		}
	}
	if len(e.Routes) > 0 {
		e.Notes = append(e.Notes, "the VIP has routes: a new connection's route depends on its first bytes (a TLS server name; on a postgres VIP the startup's database and user), which explain does not see; the pick is the default route's (its own backends)")
	}
}

// sniStatus fills the routes of v's status (r.mu held).
func (r *Runtime) sniStatus(v *vip, s *plane.VIPStatus) {
	vc := v.cfg()
	router, ok := v.dp.(plane.Router)
	if len(vc.Routes) == 0 || !ok {
		return
	}
	sni := &plane.SNIStatus{Timeout: vc.SNITimeout, NoMatch: vc.SNINoMatch.String()}
	for i := range vc.Routes {
		rv, ok := v.routes[vc.Routes[i].Name]
		if !ok {
			continue
		}
		rs := rv.status()
		for j := range rs.Backends {
			if !rs.Backends[j].Removed {
				r.healthStatus(rv, &rs.Backends[j])
			}
		}
		rc := &vc.Routes[i]
		sni.Routes = append(sni.Routes, plane.RouteStatus{Name: rc.Name, Names: rc.Names, Databases: rc.Databases, Users: rc.Users,
			Algorithm: rs.Algorithm, Eligible: rs.Eligible, Backends: rs.Backends})
	}
	router.FillSNI(sni)
	s.SNI = sni
}
