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
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/snapshot"
)

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

// newDataPlane opens the data plane vc's mode and protocol ask for, and
// returns it with its update: what applies a reload's settings to it. It
// is the only place that dispatches on mode.
func newDataPlane(key l4.VIPKey, vc *config.VIP, deps planeDeps) (plane.Plane, func(*config.VIP) error, error) {
	switch {
	case vc.Mode == l4.ModeProxy && key.Proto == l4.TCP:
		p, err := newTCPPlane(key, vc, deps)
		if err != nil {
			return nil, nil, err
		}
		return p, p.update, nil
	case vc.Mode == l4.ModeProxy && key.Proto == l4.UDP:
		p, err := newUDPPlane(key, vc, deps)
		if err != nil {
			return nil, nil, err
		}
		return p, p.update, nil
	case vc.Mode == l4.ModeXDP:
		p, err := newXDPPlane(key, vc, deps.xdp, deps.log)
		if err != nil {
			return nil, nil, err
		}
		return p, p.update, nil
	}
	return nil, nil, fmt.Errorf("mode %s for %s VIPs: %w", vc.Mode, key.Proto, errModeUnavailable)
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

func (p *tcpPlane) Serve() { go p.svc.Serve() }

// publish: the service reads the store; a new snapshot (a backend up, a
// reload that raised a cap) may have room for connections waiting for a
// backend slot.
func (p *tcpPlane) Publish(*snapshot.Snapshot) error { p.svc.ServeQueue(); return nil }
func (p *tcpPlane) StopAccepting()                   { _ = p.svc.Close() }
func (p *tcpPlane) Drain(ctx context.Context) int    { return p.svc.Drain(ctx) }
func (p *tcpPlane) Close()                           { _ = p.svc.Close() }
func (p *tcpPlane) ResetWhere(m func(*l4.Backend) bool, why l4.EndReason) int {
	return p.svc.ResetWhere(m, why)
}
func (p *tcpPlane) CloseSome(b *l4.Backend, n int, how plane.CloseHow) (int, error) {
	return p.svc.CloseSome(b, n, proxyClose(how)), nil
}
func (p *tcpPlane) BackendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	releaseAll(bs, release)
}
func (p *tcpPlane) BackendDown(*l4.Backend) {} // connections end by on_down or by themselves
func (p *tcpPlane) OutlivesProcess() bool   { return false }

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

func (p *tcpPlane) FillStatus(s *VIPStatus) {
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
type udpPlane struct {
	svc      *proxy.UDPService
	settings atomic.Pointer[proxy.UDPSettings] // what explain reads
}

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
	p := &udpPlane{svc: svc}
	p.settings.Store(&ust)
	return p, nil
}

func (p *udpPlane) Serve()                           { go p.svc.Serve() }
func (p *udpPlane) Publish(*snapshot.Snapshot) error { return nil } // the service reads the store
func (p *udpPlane) update(vc *config.VIP) error {
	st, err := udpSettings(vc)
	if err != nil {
		return err
	}
	if err := p.svc.Update(st); err != nil {
		return err
	}
	p.settings.Store(&st)
	return nil
}
func (p *udpPlane) StopAccepting()                                      {} // datagrams have no backlog to refuse: drain closes
func (p *udpPlane) Drain(context.Context) int                           { _ = p.svc.Close(); return 0 }
func (p *udpPlane) Close()                                              { _ = p.svc.Close() }
func (p *udpPlane) ResetWhere(func(*l4.Backend) bool, l4.EndReason) int { return 0 } // sessions move on their next datagram

// closeSome: a UDP VIP rebalances by itself, as sessions end.
func (p *udpPlane) CloseSome(*l4.Backend, int, plane.CloseHow) (int, error) {
	return 0, fmt.Errorf("%w: udp VIPs are not rebalanced; a session ends after session_timeout without traffic and the next one is balanced anew", plane.ErrCannotRebalance)
}
func (p *udpPlane) BackendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	releaseAll(bs, release)
}
func (p *udpPlane) BackendDown(*l4.Backend) {} // sessions move on their next datagram
func (p *udpPlane) OutlivesProcess() bool   { return false }

// proxyClose is how in the proxy's terms.
func proxyClose(how plane.CloseHow) proxy.CloseHow {
	if how == plane.CloseReset {
		return proxy.CloseReset
	}
	return proxy.CloseFIN
}

// releaseAll releases every backend at once: a proxy plane holds no index.
func releaseAll(bs []*l4.Backend, release func(*l4.Backend)) {
	for _, b := range bs {
		release(b)
	}
}

func (p *udpPlane) FillStatus(s *VIPStatus) {
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
