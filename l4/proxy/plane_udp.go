// A UDP VIP's data plane: its socket group and UDPService behind
// l4/plane's contract, with its side of an upgrade.

package proxy

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// UDPPlaneSettings are what a UDP VIP's plane is made and updated with.
type UDPPlaneSettings struct {
	Service UDPSettings // what its sessions run with (Access: from Lists)
	Lists
	Freebind bool // listen on an address the host does not have (yet)
}

// service is s.Service with its access list.
func (s UDPPlaneSettings) service() (st UDPSettings, err error) {
	st = s.Service
	st.Access, err = s.acl(st.Name)
	return st, err
}

// UDPPlane is a UDP VIP in proxy mode.
type UDPPlane struct {
	svc *UDPService
	listening
	settings atomic.Pointer[UDPSettings] // in force, for explain
}

// NewUDP opens a UDP VIP's plane: its sockets (or the inherited group,
// read only once ResumeReading says so) and its service.
func (ps *Planes) NewUDP(v PlaneVIP, s UDPPlaneSettings) (*UDPPlane, error) {
	st, err := s.service()
	if err != nil {
		CloseSockets(v.Inherited...)
		return nil, err
	}
	ucfg := UDPConfig{Snapshots: v.Snapshots, Settings: st, Log: v.Log, Observer: v.Observer, Self: &ps.self, Loops: ps.loops}
	if len(v.Inherited) > 0 {
		// The service owns them now, also when it fails. It reads them once
		// it has the old process's sessions (ResumeReading).
		ucfg.Group, ucfg.Paused = v.Inherited, true
	} else {
		group := ps.loops != nil && ps.loops.Len() > 1 // a socket per loop
		conn, err := ListenUDP(v.Key.Addr, ListenOptions{Freebind: s.Freebind, ReusePort: group})
		if err != nil {
			return nil, err
		}
		ucfg.Conn = conn
	}
	svc, err := NewUDPService(ucfg)
	if err != nil {
		if ucfg.Conn != nil {
			ucfg.Conn.Close()
		}
		return nil, err
	}
	ps.self.Add(v.Key)
	p := &UDPPlane{svc: svc, listening: listening{&ps.self, v.Key}}
	p.settings.Store(&st)
	return p, nil
}

// Update swaps in the new settings.
func (p *UDPPlane) Update(s UDPPlaneSettings) error {
	st, err := s.service()
	if err != nil {
		return err
	}
	if err := p.svc.Update(st); err != nil {
		return err
	}
	p.settings.Store(&st)
	return nil
}

func (p *UDPPlane) Serve()                           { go p.svc.Serve() }
func (p *UDPPlane) Publish(*snapshot.Snapshot) error { return nil } // the service reads the store

// StopAccepting: datagrams have no backlog to refuse; Drain closes.
func (p *UDPPlane) StopAccepting() { p.unlisten() }

func (p *UDPPlane) Drain(context.Context) int {
	p.unlisten()
	_ = p.svc.Close()
	return 0
}

func (p *UDPPlane) Close() {
	p.unlisten()
	_ = p.svc.Close()
}

func (p *UDPPlane) ResetWhere(func(*l4.Backend) bool, l4.EndReason) int { return 0 } // sessions move on their next datagram

// CloseSome: a UDP VIP rebalances by itself, as sessions end.
func (p *UDPPlane) CloseSome(*l4.Backend, int, bool) (int, error) {
	return 0, fmt.Errorf("%w: udp VIPs are not rebalanced; a session ends after session_timeout without traffic and the next one is balanced anew", plane.ErrCannotRebalance)
}

func (p *UDPPlane) BackendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	releaseAll(bs, release)
}

func (p *UDPPlane) BackendDown(*l4.Backend) {} // sessions move on their next datagram
func (p *UDPPlane) OutlivesProcess() bool   { return false }

func (p *UDPPlane) FillStatus(s *plane.VIPStatus) {
	st := &p.svc.Stats
	s.Active, s.Accepted, s.NoBackend = p.svc.Sessions(), st.SessionsCreated.Load(), st.NoBackend.Load()
	s.ConnLogDropped = st.ConnLogDropped.Load()
	s.Denied, s.ClientLimited = st.Denied.Load(), st.ClientLimited.Load()
	s.UDP = &plane.UDPStatus{QueueDropped: p.svc.QueueDrops(), ReplyQueueDropped: st.ReplyQueueDrops.Load()}
	plane.LoadCounters(s.UDP, st) // the others, by name
}

// ListenFDs duplicates the socket group for the next l4lb.
func (p *UDPPlane) ListenFDs() ([]int, error) { return p.svc.GroupFDs() }

// PauseAccepting stops (true) or resumes reading the VIP's sockets; the
// sessions keep relaying replies.
func (p *UDPPlane) PauseAccepting(pause bool) { p.svc.PauseReading(pause) }

// AdoptSession takes over a session the previous l4lb detached (see
// UDPService.AdoptSession).
func (p *UDPPlane) AdoptSession(st SessionState, fd int, b *l4.Backend) error {
	return p.svc.AdoptSession(st, fd, b)
}

// ResumeReading starts reading the sockets taken from the previous l4lb,
// once its sessions are adopted (a no-op for sockets read already).
func (p *UDPPlane) ResumeReading() { p.svc.PauseReading(false) }

func (p *UDPPlane) udpService() *UDPService { return p.svc }
