// A TCP VIP's data plane: its listener and TCPService behind l4/plane's
// contract, with its SNI routes and its side of an upgrade.

package proxy

import (
	"context"
	"net"
	"sync"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// TCPPlaneSettings are what a TCP VIP's plane is made and updated with.
type TCPPlaneSettings struct {
	Service Settings // what its connections run with (Access: from Lists)
	Lists
	Freebind    bool // listen on an address the host does not have (yet)
	DeferAccept bool // TCP_DEFER_ACCEPT on the listener
}

// service is s.Service with its access list.
func (s TCPPlaneSettings) service() (st Settings, err error) {
	st = s.Service
	st.Access, err = s.acl(st.Name)
	return st, err
}

// TCPPlane is a TCP VIP in proxy mode.
type TCPPlane struct {
	svc *TCPService
	listening

	mu     sync.Mutex
	routes map[string]*Route // the SNI routes by name, kept across SetRoutes
}

// NewTCP opens a TCP VIP's plane: its listener (or the inherited one) and
// its service.
func (ps *Planes) NewTCP(v PlaneVIP, s TCPPlaneSettings) (*TCPPlane, error) {
	st, err := s.service()
	if err != nil {
		CloseSockets(v.Inherited...)
		return nil, err
	}
	opts := ListenOptions{KeepAlive: keepAliveFor(st), Freebind: s.Freebind, DeferAccept: s.DeferAccept}
	var ln *net.TCPListener
	if len(v.Inherited) > 0 {
		ln, err = AdoptTCPListener(v.Inherited[0], opts)
	} else {
		ln, err = ListenTCP(v.Key.Addr, opts)
	}
	if err != nil {
		return nil, err
	}
	svc, err := NewTCPService(TCPConfig{
		Listener: ln, Snapshots: v.Snapshots, Pipes: ps.pipes, Settings: st,
		Log: v.Log, Observer: v.Observer, Budget: ps.budget, Self: &ps.self, Loops: ps.loops, Kernel: ps.kernel,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	ps.self.Add(v.Key)
	return &TCPPlane{svc: svc, listening: listening{&ps.self, v.Key}}, nil
}

// Update swaps in the new settings and sets defer_accept on the running
// listener (one setsockopt, also when unchanged): the socket is never
// reopened, so a reload refuses no connect.
func (p *TCPPlane) Update(s TCPPlaneSettings) error {
	st, err := s.service()
	if err != nil {
		return err
	}
	p.svc.Update(st)
	return p.svc.SetDeferAccept(s.DeferAccept)
}

func (p *TCPPlane) Serve() { go p.svc.Serve() }

// Publish: the service reads the store; a new snapshot (a backend up, a
// reload that raised a cap) may have room for connections waiting for a
// backend slot.
func (p *TCPPlane) Publish(*snapshot.Snapshot) error { p.svc.ServeQueue(); return nil }

// StopAccepting closes the listener; established connections go on.
func (p *TCPPlane) StopAccepting() {
	p.unlisten()
	_ = p.svc.Close()
}

func (p *TCPPlane) Drain(ctx context.Context) int {
	p.unlisten()
	return p.svc.Drain(ctx)
}

func (p *TCPPlane) Close() {
	p.unlisten()
	_ = p.svc.Close()
}

func (p *TCPPlane) ResetWhere(m func(*l4.Backend) bool, why l4.EndReason) int {
	return p.svc.ResetWhere(m, why)
}

func (p *TCPPlane) CloseSome(b *l4.Backend, n int, reset bool) (int, error) {
	return p.svc.CloseSome(b, n, closeHow(reset)), nil
}

func (p *TCPPlane) BackendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	releaseAll(bs, release)
}

func (p *TCPPlane) BackendDown(*l4.Backend) {} // connections end by on_down or by themselves
func (p *TCPPlane) OutlivesProcess() bool   { return false }

func (p *TCPPlane) FillStatus(s *plane.VIPStatus) {
	st := &p.svc.Stats
	s.Active, s.Accepted = st.Active.Load(), st.Accepted.Load()
	s.NoBackend, s.ConnectFails = st.NoBackend.Load(), st.ConnectFails.Load()
	s.ConnLogDropped = st.ConnLogDropped.Load()
	s.Denied, s.ClientLimited = st.Denied.Load(), st.ClientLimited.Load()
	s.TCP = &plane.TCPStatus{Queued: int64(p.svc.Queued())}
	plane.LoadCounters(s.TCP, st) // every counter but Queued, by name
}

// SayGoodbye asks the connections to close at a boundary of the VIP's
// app_protocol (see TCPService.SayGoodbye).
func (p *TCPPlane) SayGoodbye(restart bool) int { return p.svc.SayGoodbye(restart) }

// ListenFDs duplicates the listener for the next l4lb.
func (p *TCPPlane) ListenFDs() ([]int, error) {
	fd, err := p.svc.ListenerFD()
	if err != nil {
		return nil, err
	}
	return []int{fd}, nil
}

// PauseAccepting takes the listener out of the loops (true) or back.
func (p *TCPPlane) PauseAccepting(pause bool) { p.svc.PauseAccepting(pause) }

// AdoptConn takes over a connection the previous l4lb detached (see
// TCPService.AdoptConn).
func (p *TCPPlane) AdoptConn(st ConnState, fds []int, b *l4.Backend) error {
	return p.svc.AdoptConn(st, fds, b)
}

func (p *TCPPlane) tcpService() *TCPService { return p.svc }

// RoutePlane is the plane of one SNI route: the service's connections
// whose backends the route chose.
func (p *TCPPlane) RoutePlane() plane.Plane { return routePlane{p.svc} }

// SetRoutes gives the service the table of t (nil: no routes). A route
// keeps its proxy Route, and so its counter, while its name and store
// stay.
func (p *TCPPlane) SetRoutes(t *plane.RouteTable) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t == nil || len(t.Routes) == 0 {
		p.routes = nil
		p.svc.SetRoutes(nil)
		return nil
	}
	next := make(map[string]*Route, len(t.Routes))
	prs := make([]*Route, len(t.Routes))
	names, dbs, users := make([][]string, len(t.Routes)), make([][]string, len(t.Routes)), make([][]string, len(t.Routes))
	for i, r := range t.Routes {
		pr, ok := p.routes[r.Name]
		if !ok || pr.Snapshots != r.Snapshots {
			pr = &Route{Name: r.Name, Snapshots: r.Snapshots, Observer: r.Observer}
		}
		next[r.Name], prs[i], names[i], dbs[i], users[i] = pr, pr, r.Names, r.Databases, r.Users
	}
	noMatch := NoRouteDefault
	if t.CloseNoMatch {
		noMatch = NoRouteClose
	}
	table, err := NewRoutes(prs, names, t.Timeout, noMatch)
	if err != nil {
		p.routes = nil
		p.svc.SetRoutes(nil)
		return err
	}
	if t.Startup {
		table.WithStartup(prs, dbs, users)
	}
	p.routes = next
	p.svc.SetRoutes(table)
	return nil
}

// FillSNI adds the routing counters and each route's.
func (p *TCPPlane) FillSNI(s *plane.SNIStatus) {
	st := &p.svc.Stats
	s.Default, s.NoMatchCount = st.SNIDefault.Load(), st.SNINoMatch.Load()
	s.NotTLS, s.Timeouts = st.SNINotTLS.Load(), st.SNITimeouts.Load()
	if rt := p.svc.routes.Load(); rt != nil && rt.Startup {
		s.Startup = &plane.StartupStatus{}
		plane.LoadCounters(s.Startup, &st.Startup)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range s.Routes {
		if r, ok := p.routes[s.Routes[i].Name]; ok {
			s.Routes[i].Routed = r.Routed.Load()
		}
	}
}

// routePlane is a route's side of the VIP's service: connections are
// the service's, the route only chose their backends.
type routePlane struct{ svc *TCPService }

func (routePlane) Serve() {}

// Publish: the service reads the route's store; a new snapshot may have
// room for connections of the route waiting for a backend slot.
func (p routePlane) Publish(*snapshot.Snapshot) error { p.svc.ServeQueue(); return nil }
func (routePlane) StopAccepting()                     {}
func (routePlane) Drain(context.Context) int          { return 0 } // the VIP's drain covers its connections
func (routePlane) Close()                             {}
func (p routePlane) ResetWhere(m func(*l4.Backend) bool, why l4.EndReason) int {
	return p.svc.ResetWhere(m, why)
}
func (p routePlane) CloseSome(b *l4.Backend, n int, reset bool) (int, error) {
	return p.svc.CloseSome(b, n, closeHow(reset)), nil
}
func (routePlane) BackendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	releaseAll(bs, release)
}
func (routePlane) BackendDown(*l4.Backend)     {}
func (routePlane) OutlivesProcess() bool       { return false }
func (routePlane) FillStatus(*plane.VIPStatus) {}
func (routePlane) Explain(*plane.Query)        {}
