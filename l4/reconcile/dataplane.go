// The data-plane seam: what a VIP's packet path must do for the control
// loop, and the one place where a VIP's mode picks its implementation.

package reconcile

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// dataPlane moves one VIP's traffic. The TCP and UDP proxy services and
// the XDP map writer sit behind it, so the control loop (reload diff,
// health, weights, drain, status) is written once for all of them.
type dataPlane interface {
	// serve starts moving traffic, once the VIP's first snapshot is
	// published.
	serve()
	// publish makes snap the one new flows pick from. The proxy services
	// read the VIP's snapshot.Store themselves; the XDP plane writes the
	// snapshot's Maglev table and backends into its maps. It is how maps
	// stay in step with health, weights and reloads.
	publish(snap *snapshot.Snapshot) error
	// update applies the settings a reload may change on a running VIP.
	update(vc *config.VIP) error
	// stopAccepting stops new flows; established ones continue.
	stopAccepting()
	// drain waits for established flows until ctx is done, then ends the
	// rest; it returns how many it ended.
	drain(ctx context.Context) int
	// closeNow stops at once (a VIP whose start was rolled back).
	closeNow()
	// resetWhere ends the established flows whose backend matches and
	// returns how many; why is the end their log lines give (l4.EndOnDown
	// for on_down = reset).
	resetWhere(match func(*l4.Backend) bool, why l4.EndReason) int
	// closeSome ends up to n established flows of b, which it chooses,
	// and returns how many it began to end (a rebalance). n = 0 only asks
	// whether the plane can: an error wrapping ErrCannotRebalance says
	// why not.
	closeSome(b *l4.Backend, n int, how proxy.CloseHow) (int, error)
	// backendsRemoved tells the plane a reload took these backends out;
	// it calls release for each once no flow can reach it any more (the
	// backend's index may then be reused).
	backendsRemoved(bs []*l4.Backend, release func(*l4.Backend))
	// backendDown tells the plane health took b down: flows pinned to it
	// that cannot outlive it (UDP in the XDP conntrack) are let go.
	backendDown(b *l4.Backend)
	// outlivesProcess reports whether the plane keeps forwarding after
	// l4lb exits (XDP with pinned maps): shutdown then leaves it as it is
	// for the next l4lb to adopt, instead of draining it.
	outlivesProcess() bool
	// fillStatus adds the data plane's counters to s.
	fillStatus(s *VIPStatus)
	// explain answers l4lb explain for q's flow: the state the plane
	// holds for it (connections, pins, sessions, conntrack) and what it
	// would choose for a new one. It changes nothing.
	explain(q *explainQuery)
}

// planeDeps are what the data planes share across VIPs.
type planeDeps struct {
	pipes  *proxy.PipePool
	loops  *proxy.Loops      // nil: they could not start (NewTCPService and NewUDPService then fail)
	budget *proxy.ConnBudget // nil = no process-wide cap
	self   *proxy.Listeners
	log    *zap.Logger
	obs    proxy.Observer
	store  *snapshot.Store // the VIP's snapshots

	indexes *indexPool  // backend indexes (for the VIP, not the data plane)
	xdp     *xdpRuntime // the XDP program, when the config has xdp VIPs
	// xdpAt holds the XDP program once it runs, for the guard-only
	// entries of proxy VIPs (nil: never guard them).
	xdpAt *atomic.Pointer[xdpRuntime]
	// inherit holds the sockets an earlier l4lb passed (an upgrade): a
	// VIP listed there takes its socket instead of binding. nil = none.
	inherit *ListenSockets
	// carry is the previous l4lb's backend state by VIP key (an upgrade).
	carry map[string]map[l4.BackendID]BackendState
	// served is poked on every snapshot the VIP publishes.
	served *servedSignal
}

// newDataPlane opens the data plane vc's mode and protocol ask for. It is
// the only place that dispatches on mode.
func newDataPlane(key l4.VIPKey, vc *config.VIP, deps planeDeps) (dataPlane, error) {
	switch {
	case vc.Mode == l4.ModeProxy && key.Proto == l4.TCP:
		return newTCPPlane(key, vc, deps)
	case vc.Mode == l4.ModeProxy && key.Proto == l4.UDP:
		return newUDPPlane(key, vc, deps)
	case vc.Mode == l4.ModeXDP:
		return newXDPPlane(key, vc, deps.xdp, deps.log)
	}
	return nil, fmt.Errorf("mode %s for %s VIPs: %w", vc.Mode, key.Proto, errModeUnavailable)
}

// errModeUnavailable: the mode is valid config but this runtime cannot run it.
var errModeUnavailable = fmt.Errorf("not available in this version of l4lb")

// CheckModes reports VIPs whose mode this runtime cannot run, as config
// problems, so that `l4lb check` refuses what `run` would refuse.
func CheckModes(cfg *config.Config) []config.Problem {
	var out []config.Problem
	for i := range cfg.VIPs {
		v := &cfg.VIPs[i]
		if v.Mode != l4.ModeProxy && v.Mode != l4.ModeXDP {
			out = append(out, config.Problem{File: cfg.Path, Line: v.Line, VIP: v.Name, Key: fmt.Sprintf("vip[%d].mode", i),
				Msg: fmt.Sprintf("mode %s is %s; use mode = \"proxy\"", v.Mode, errModeUnavailable)})
		}
	}
	return out
}

// tcpPlane is a TCP VIP in proxy mode.
type tcpPlane struct{ svc *proxy.TCPService }

func newTCPPlane(key l4.VIPKey, vc *config.VIP, d planeDeps) (*tcpPlane, error) {
	st, err := settings(vc)
	if err != nil {
		return nil, err
	}
	opts := proxy.ListenOptions{KeepAlive: keepAliveFor(st), Freebind: vc.Freebind, DeferAccept: vc.DeferAccept}
	var ln *net.TCPListener
	if fd, ok := d.inherit.takeTCP(key); ok {
		ln, err = proxy.AdoptTCPListener(fd, opts)
	} else {
		ln, err = proxy.ListenTCP(key.Addr, opts)
	}
	if err != nil {
		return nil, err
	}
	svc, err := proxy.NewTCPService(proxy.TCPConfig{
		Listener: ln, Snapshots: d.store, Pipes: d.pipes, Settings: st,
		Log: d.log, Observer: d.obs, Budget: d.budget, Self: d.self, Loops: d.loops,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	d.self.Add(key)
	return &tcpPlane{svc: svc}, nil
}

func (p *tcpPlane) serve() { go p.svc.Serve() }

// publish: the service reads the store; a new snapshot (a backend up, a
// reload that raised a cap) may have room for connections waiting for a
// backend slot.
func (p *tcpPlane) publish(*snapshot.Snapshot) error { p.svc.ServeQueue(); return nil }
func (p *tcpPlane) stopAccepting()                   { _ = p.svc.Close() }
func (p *tcpPlane) drain(ctx context.Context) int    { return p.svc.Drain(ctx) }
func (p *tcpPlane) closeNow()                        { _ = p.svc.Close() }
func (p *tcpPlane) resetWhere(m func(*l4.Backend) bool, why l4.EndReason) int {
	return p.svc.ResetWhere(m, why)
}
func (p *tcpPlane) closeSome(b *l4.Backend, n int, how proxy.CloseHow) (int, error) {
	return p.svc.CloseSome(b, n, how), nil
}
func (p *tcpPlane) backendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	releaseAll(bs, release)
}
func (p *tcpPlane) backendDown(*l4.Backend) {} // connections end by on_down or by themselves
func (p *tcpPlane) outlivesProcess() bool   { return false }

// update swaps in the new settings and sets defer_accept on the running
// listener (one setsockopt, also when unchanged): the socket is never
// reopened, so a reload refuses no connect.
func (p *tcpPlane) update(vc *config.VIP) error {
	st, err := settings(vc)
	if err != nil {
		return err
	}
	p.svc.Update(st)
	return p.svc.SetDeferAccept(vc.DeferAccept)
}

func (p *tcpPlane) fillStatus(s *VIPStatus) {
	st := &p.svc.Stats
	s.Active, s.Accepted = st.Active.Load(), st.Accepted.Load()
	s.NoBackend, s.ConnectFails = st.NoBackend.Load(), st.ConnectFails.Load()
	s.ConnLogDropped = st.ConnLogDropped.Load()
	s.Denied, s.ClientLimited = st.Denied.Load(), st.ClientLimited.Load()
	s.TCP = &TCPStatus{
		AcceptErrors: st.AcceptErrors.Load(), IdleClosed: st.IdleClosed.Load(),
		LocalErrors: st.LocalErrors.Load(), PipelessCopies: st.PipelessCopies.Load(), LimitWaits: st.LimitWaits.Load(),
		ProxyUntrusted: st.ProxyUntrusted.Load(), ProxyMalformed: st.ProxyMalformed.Load(), ProxyTimeouts: st.ProxyTimeouts.Load(),
		FirstByteTimeouts: st.FirstByteTimeouts.Load(),
		LostWakeups:       st.LostWakeups.Load(),
		Queued:            int64(p.svc.Queued()),
		QueueWaits:        st.QueueWaits.Load(),
		QueueTimeouts:     st.QueueTimeouts.Load(),
	}
}

// udpPlane is a UDP VIP in proxy mode.
type udpPlane struct{ svc *proxy.UDPService }

func newUDPPlane(key l4.VIPKey, vc *config.VIP, d planeDeps) (*udpPlane, error) {
	ust, err := udpSettings(vc)
	if err != nil {
		return nil, err
	}
	ucfg := proxy.UDPConfig{Snapshots: d.store, Settings: ust, Log: d.log, Observer: d.obs, Self: d.self, Loops: d.loops}
	if fds, ok := d.inherit.takeUDP(key); ok {
		// The service owns them now, also when it fails. It reads them once
		// it has the old process's sessions (Runtime.ResumeReading).
		ucfg.Group, ucfg.Paused = fds, true
	} else {
		group := d.loops != nil && d.loops.Len() > 1 // a socket per loop
		conn, err := proxy.ListenUDP(key.Addr, proxy.ListenOptions{Freebind: vc.Freebind, ReusePort: group})
		if err != nil {
			return nil, err
		}
		ucfg.Conn = conn
	}
	svc, err := proxy.NewUDPService(ucfg)
	if err != nil {
		if ucfg.Conn != nil {
			ucfg.Conn.Close()
		}
		return nil, err
	}
	d.self.Add(key)
	return &udpPlane{svc: svc}, nil
}

func (p *udpPlane) serve()                           { go p.svc.Serve() }
func (p *udpPlane) publish(*snapshot.Snapshot) error { return nil } // the service reads the store
func (p *udpPlane) update(vc *config.VIP) error {
	st, err := udpSettings(vc)
	if err != nil {
		return err
	}
	return p.svc.Update(st)
}
func (p *udpPlane) stopAccepting()                                      {} // datagrams have no backlog to refuse: drain closes
func (p *udpPlane) drain(context.Context) int                           { _ = p.svc.Close(); return 0 }
func (p *udpPlane) closeNow()                                           { _ = p.svc.Close() }
func (p *udpPlane) resetWhere(func(*l4.Backend) bool, l4.EndReason) int { return 0 } // sessions move on their next datagram

// closeSome: a UDP VIP rebalances by itself, as sessions end.
func (p *udpPlane) closeSome(*l4.Backend, int, proxy.CloseHow) (int, error) {
	return 0, fmt.Errorf("%w: udp VIPs are not rebalanced; a session ends after session_timeout without traffic and the next one is balanced anew", ErrCannotRebalance)
}
func (p *udpPlane) backendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	releaseAll(bs, release)
}
func (p *udpPlane) backendDown(*l4.Backend) {} // sessions move on their next datagram
func (p *udpPlane) outlivesProcess() bool   { return false }

// releaseAll releases every backend at once: a proxy plane holds no index.
func releaseAll(bs []*l4.Backend, release func(*l4.Backend)) {
	for _, b := range bs {
		release(b)
	}
}

func (p *udpPlane) fillStatus(s *VIPStatus) {
	st := &p.svc.Stats
	s.Active, s.Accepted, s.NoBackend = p.svc.Sessions(), st.SessionsCreated.Load(), st.NoBackend.Load()
	s.ConnLogDropped = st.ConnLogDropped.Load()
	s.Denied, s.ClientLimited = st.Denied.Load(), st.ClientLimited.Load()
	s.UDP = &UDPStatus{
		Datagrams: st.Datagrams.Load(), Replies: st.Replies.Load(),
		Truncated: st.Truncated.Load(), Dropped: st.Dropped.Load(),
		SessionsRefused: st.SessionsRefused.Load(), Moved: st.Moved.Load(),
		BackendsFull: st.BackendsFull.Load(), QueueDropped: p.svc.QueueDrops(),
		ReplyQueueDropped: st.ReplyQueueDrops.Load(), SocketErrors: st.SocketErrors.Load(),
	}
}
