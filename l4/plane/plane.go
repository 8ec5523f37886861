// The contract: what a VIP's data plane does for the control loop, and
// the small optional interfaces of what only some planes do.

package plane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// Plane moves one VIP's traffic. The control loop (reload diff, health,
// weights, drain, status, explain) is written once against it; each
// plane is made and updated with its own settings, which the loop maps
// from the config.
type Plane interface {
	// Serve starts moving traffic, once the VIP's first snapshot is
	// published.
	Serve()
	// Publish makes snap the one new flows pick from. The proxy planes
	// read the VIP's snapshot.Store themselves; the XDP plane writes the
	// snapshot's Maglev table and backends into its maps. It is how maps
	// stay in step with health, weights and reloads.
	Publish(snap *snapshot.Snapshot) error
	// StopAccepting stops new flows; established ones continue.
	StopAccepting()
	// Drain waits for established flows until ctx is done, then ends the
	// rest; it returns how many it ended.
	Drain(ctx context.Context) int
	// Close stops at once (a VIP whose start was rolled back).
	Close()
	// ResetWhere ends the established flows whose backend matches and
	// returns how many; why is the end their log lines give (l4.EndOnDown
	// for on_down = reset).
	ResetWhere(match func(*l4.Backend) bool, why l4.EndReason) int
	// CloseSome ends up to n established flows of b, which it chooses,
	// in order or, with reset, with a reset to both sides, and returns how
	// many it began to end (a rebalance). n = 0 only asks whether the
	// plane can: an error wrapping ErrCannotRebalance says why not.
	CloseSome(b *l4.Backend, n int, reset bool) (int, error)
	// BackendsRemoved tells the plane a reload took these backends out;
	// it calls release for each once no flow can reach it any more (the
	// backend's index may then be reused).
	BackendsRemoved(bs []*l4.Backend, release func(*l4.Backend))
	// BackendDown tells the plane health took b down: flows pinned to it
	// that cannot outlive it (UDP in the XDP conntrack) are let go.
	BackendDown(b *l4.Backend)
	// OutlivesProcess reports whether the plane keeps forwarding after
	// l4lb exits (XDP with pinned maps): shutdown then leaves it as it is
	// for the next l4lb to adopt, instead of draining it.
	OutlivesProcess() bool
	// FillStatus adds the plane's counters to s.
	FillStatus(s *VIPStatus)
	// Explain answers l4lb explain for q's flow: the state the plane
	// holds for it (connections, pins, sessions, conntrack), what it
	// would choose for a new one, and the verdict of the allow/deny lists
	// it enforces (Query.Access). It changes nothing.
	Explain(q *Query)
}

// ErrCannotRebalance: the VIP's data plane, its config or its state
// rules a rebalance out (the admin API answers 409).
var ErrCannotRebalance = errors.New("cannot rebalance")

// Observer receives what a plane learns of backends on the way: the
// handshake times least_time uses and the failures that count as passive
// health marks.
type Observer interface {
	ConnectOK(b *l4.Backend, handshake time.Duration)
	ConnectFailed(b *l4.Backend, err error)
}

// StallObserver is an Observer that also learns, at each look of a VIP
// with stall_timeout, the stall state of every backend whose connections
// stall or that is degraded: a plane reports a backend on every look
// while it is degraded, and once more when it is not.
type StallObserver interface {
	BackendStall(b *l4.Backend, r StallReport)
}

// StallReport is what one look at a backend's open connections found
// (stall_timeout).
type StallReport struct {
	// Degraded: at least one connection stalled (a request waited
	// stall_timeout with no byte back) and no connection got a byte back
	// since that request was sent. The backend should get no new flow.
	Degraded bool
	Conns    int           // its open connections
	Stalled  int           // those stalled
	Waited   time.Duration // the longest wait of a stalled connection
	// Unacked and ZeroWindow count stalled connections whose backend
	// socket had sent data unacknowledged (the host or the network does
	// not answer), or a zero send window (the server reads nothing):
	// TCP_INFO. Neither: the kernel acknowledged the requests and the
	// server process does not answer (a hung or stopped process).
	Unacked, ZeroWindow int
	// Recovered says why a degraded backend is back ("" while degraded).
	Recovered string
}

// Reason is the report as status and the log say it: "3 of 4
// connections: no reply for 5s (requests acknowledged by the server's
// kernel)".
func (r StallReport) Reason() string {
	if !r.Degraded {
		return r.Recovered
	}
	why := "requests acknowledged by the server's kernel"
	switch {
	case r.Unacked > 0:
		why = fmt.Sprintf("%d with data unacknowledged", r.Unacked)
	case r.ZeroWindow > 0:
		why = fmt.Sprintf("%d with a zero window", r.ZeroWindow)
	}
	return fmt.Sprintf("%d of %d connections: no reply for %s (%s)", r.Stalled, r.Conns, r.Waited.Round(100*time.Millisecond), why)
}

// Router is a plane that sends each new connection to a route by the
// server name of its TLS ClientHello (SNI), or on a postgres VIP by the
// database and user of its StartupMessage, a route having backends of its
// own: a TCP proxy VIP.
type Router interface {
	// RoutePlane is the plane of one route: no listener of its own, the
	// router's connections whose backends the route chose.
	RoutePlane() Plane
	// SetRoutes makes t the routes new connections pick from (nil: none,
	// the VIP's own backends take every connection). A route kept by
	// name and store keeps its counter. On an error no route is used.
	SetRoutes(t *RouteTable) error
	// FillSNI adds the routing's counters to s, and each route's to its
	// entry in s.Routes (by name).
	FillSNI(s *SNIStatus)
}

// RouteTable is a VIP's SNI routes.
type RouteTable struct {
	Routes  []Route
	Timeout time.Duration // for a whole ClientHello (or startup packet)
	// Startup: read PostgreSQL startup packets of clients that do not open
	// with TLS (app_protocol postgres), for the routes' Databases and Users.
	Startup bool
	// CloseNoMatch resets a connection no route takes; else the VIP's own
	// backends take it.
	CloseNoMatch bool
}

// Route is one SNI route: the server names it takes and where its
// connections pick their backends.
type Route struct {
	Name  string
	Names []string
	// Databases and Users match a startup's parameters (Startup tables):
	// a name, or a prefix written "prefix*"; nil: any.
	Databases, Users []string
	Snapshots        *snapshot.Store
	Observer         Observer
}

// Goodbye is a plane that can end its established flows at a boundary
// of their application protocol (a TCP proxy VIP with an app_protocol).
type Goodbye interface {
	// SayGoodbye asks every established flow (and every flow that opens
	// from now on) to end at its protocol's next boundary; restart: l4lb
	// stops or restarts (a WebSocket client hears 1012 service restart
	// rather than 1001 going away). The drain that follows ends the rest
	// at its deadline. It returns how many it asked; 0 on a VIP without
	// an app_protocol.
	SayGoodbye(restart bool) int
}

// LiveCounter is a plane that counts each backend's live flows itself
// (XDP: from its conntrack) instead of in the backend's own counter,
// which the proxy planes keep.
type LiveCounter interface {
	LiveFlows(b *l4.Backend) int64
}

// ListenerHandoff is a plane whose listening sockets the next l4lb can
// take over in an upgrade (the proxy planes).
type ListenerHandoff interface {
	// ListenFDs duplicates the plane's sockets for another process: a TCP
	// VIP's listener, a UDP VIP's socket group in loop order. The caller
	// owns and closes them.
	ListenFDs() ([]int, error)
	// PauseAccepting stops (true) or resumes (false) taking new flows
	// while the sockets stay open for another process; established flows
	// go on.
	PauseAccepting(pause bool)
}

// ModeChange is a plane that takes part in a reload that changes its
// VIP's mode without cutting the VIP's established flows (the XDP plane):
// the plane the VIP leaves keeps them until they end or drain_timeout,
// while the new one takes every new flow, both on the VIP's address. A
// plane without it leaves by StopAccepting (a proxy plane: its listener
// closes, its connections go on) and comes in as it always does.
type ModeChange interface {
	// Yield stops new flows, as StopAccepting does, but leaves their
	// packets to the kernel, where the VIP's new plane (the proxy)
	// listens; the flows it holds go on until Drain ends them.
	Yield()
	// Inherit says (true, before the first Publish) that the VIP's old
	// plane, the proxy, still holds established connections whose
	// packets reach this host: the plane leaves the packets of flows it
	// did not open to the kernel. False once they are gone.
	Inherit(on bool)
}
