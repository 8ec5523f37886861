// The proxy's data planes (l4/plane's contract): what they share across
// VIPs, and what a VIP's plane is made with.

package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// Planes are what the proxy planes of one process share: the splice
// pipes, the event loops, the connection budget and the set of addresses
// the VIPs listen on. The control loop makes one and opens every proxy
// VIP's plane through it.
type Planes struct {
	log    *zap.Logger
	pipes  *PipePool
	loops  *Loops      // nil: they could not start (NewTCP and NewUDP then fail)
	budget *ConnBudget // nil = no process-wide cap
	kernel *KernelFwd  // kernel forwarding, loaded when a connection first asks
	self   Listeners
}

// PlanesOptions are the process-wide settings of the proxy planes.
type PlanesOptions struct {
	PipeSize int // bytes per splice pipe; 0 = default
	// MaxConns caps proxied TCP connections across all VIPs (see
	// BudgetForFiles); 0 = no cap.
	MaxConns int
	// Workers is the number of event loops (0 = GOMAXPROCS).
	Workers int
}

// NewPlanes starts the event loops. If they cannot start, it logs why
// and every plane it opens fails; the XDP planes are not affected.
func NewPlanes(o PlanesOptions, log *zap.Logger) *Planes {
	ps := &Planes{log: log, pipes: NewPipePool(o.PipeSize), kernel: NewKernelFwd(log)}
	if o.MaxConns > 0 {
		ps.budget = NewConnBudget(o.MaxConns)
	}
	loops, err := NewLoops(o.Workers, ps.pipes)
	if err != nil {
		log.Error("event loops unavailable: proxy-mode VIPs cannot start", zap.Error(err))
	}
	ps.loops = loops
	return ps
}

// Configure applies the settings a reload may change for all VIPs: the
// cap on open pipes (0 = none) and the loops' busy polling.
func (ps *Planes) Configure(maxPipes int, busyPoll time.Duration) {
	ps.pipes.SetMax(maxPipes)
	if ps.loops != nil {
		ps.loops.SetBusyPoll(busyPoll)
	}
}

// RefreshLocal reads the host's addresses again (see Listeners).
func (ps *Planes) RefreshLocal() error { return ps.self.RefreshLocal() }

// FillStatus adds the pipes and the loops to s.
func (ps *Planes) FillStatus(s *plane.Status) {
	s.Pipes = plane.PipeStatus{Open: ps.pipes.Open(), Lent: ps.pipes.Lent(), Max: ps.pipes.Max()}
	if ps.loops != nil {
		sessions := ps.loops.Sessions()
		s.BusyPoll = ps.loops.BusyPoll()
		var live int64
		for i, n := range ps.loops.Conns() {
			s.Workers = append(s.Workers, plane.WorkerStatus{Conns: n, UDPSessions: sessions[i]})
			live += n
		}
		ps.kernel.fillStatus(s, live)
	}
}

// Close stops the loops and frees the pipes, once every plane is closed.
func (ps *Planes) Close() {
	if ps.loops != nil {
		ps.loops.Close()
	}
	ps.kernel.Close()
	ps.pipes.Close()
}

// PlaneVIP is what a VIP's plane is given besides its settings.
type PlaneVIP struct {
	Key       l4.VIPKey
	Snapshots *snapshot.Store // what new flows pick from
	Observer  Observer
	Log       *zap.Logger
	// Inherited are the VIP's sockets an earlier l4lb passed (an
	// upgrade): a TCP VIP's listener, a UDP VIP's socket group in loop
	// order. The plane owns them, also when it fails. nil: it binds its
	// own.
	Inherited []int
}

// listening is a proxy plane's entry in the process's listener set.
type listening struct {
	self *Listeners
	key  l4.VIPKey
}

// unlisten takes the VIP out of the set: it stops listening.
func (l listening) unlisten() { l.self.Remove(l.key) }

// Lists are a VIP's allow and deny lists: each plane builds the
// guard.ACL it enforces from them.
type Lists struct {
	Allow, Deny []netip.Prefix
}

// acl is the lists' guard.ACL (nil: none), for the VIP called name.
func (l Lists) acl(name string) (*guard.ACL, error) {
	acl, err := guard.NewACL(l.Allow, l.Deny)
	if err != nil {
		return nil, fmt.Errorf("vip %q: %w", name, err)
	}
	return acl, nil
}

// closeHow is how CloseSome's reset asks to close.
func closeHow(reset bool) CloseHow {
	if reset {
		return CloseReset
	}
	return CloseFIN
}

// releaseAll releases every backend at once: a proxy plane holds no index.
func releaseAll(bs []*l4.Backend, release func(*l4.Backend)) {
	for _, b := range bs {
		release(b)
	}
}

func keepAliveFor(st Settings) net.KeepAliveConfig {
	if st.KeepAlive <= 0 {
		return net.KeepAliveConfig{}
	}
	return net.KeepAliveConfig{Enable: true, Idle: st.KeepAlive, Interval: st.KeepAlive / 4, Count: 4}
}

// explainAccess adds acl's verdict for the client (nil: no lists).
func explainAccess(q *plane.Query, acl *guard.ACL) {
	if acl != nil {
		r, _ := acl.Match(q.Flow.Src.Addr())
		q.Access(acl.Allowed(q.Flow.Src.Addr()), r.Net, r.Allowed)
	}
}
