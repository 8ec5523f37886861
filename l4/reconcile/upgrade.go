// Upgrade support: the listening sockets a running l4lb hands to the next
// one, the pause of the old one's accepting while the new one takes over,
// and the hold on the old one's XDP map writes.

package reconcile

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/proxy"
)

// ListenSockets are a process's VIP sockets by VIP key (l4.VIPKey.String()):
// a TCP VIP's listener, a UDP VIP's socket group in loop order. They are
// duplicates the holder owns and closes.
type ListenSockets struct {
	TCP map[string]int
	UDP map[string][]int
}

// Len returns the number of descriptors held.
func (ls *ListenSockets) Len() int {
	if ls == nil {
		return 0
	}
	n := len(ls.TCP)
	for _, g := range ls.UDP {
		n += len(g)
	}
	return n
}

// Close closes every descriptor still held.
func (ls *ListenSockets) Close() {
	if ls == nil {
		return
	}
	for k, fd := range ls.TCP {
		unix.Close(fd)
		delete(ls.TCP, k)
	}
	for k, g := range ls.UDP {
		for _, fd := range g {
			unix.Close(fd)
		}
		delete(ls.UDP, k)
	}
}

// take hands over key's sockets, if held (nil: none): the caller owns
// them.
func (ls *ListenSockets) take(key l4.VIPKey) []int {
	if ls == nil {
		return nil
	}
	k := key.String()
	if fd, ok := ls.TCP[k]; ok {
		delete(ls.TCP, k)
		return []int{fd}
	}
	fds := ls.UDP[k]
	delete(ls.UDP, k)
	return fds
}

// ExportListeners duplicates the sockets of every proxy VIP that accepts
// (not those draining after a reload removed them), for the next l4lb.
func (r *Runtime) ExportListeners() (*ListenSockets, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &ListenSockets{TCP: map[string]int{}, UDP: map[string][]int{}}
	for key, v := range r.vips {
		h, ok := v.dp.(plane.ListenerHandoff)
		if !ok {
			continue
		}
		fds, err := h.ListenFDs()
		switch {
		case err != nil:
		case key.Proto == l4.TCP:
			out.TCP[key.String()] = fds[0]
		default:
			out.UDP[key.String()] = fds
		}
		if err != nil {
			out.Close()
			return nil, fmt.Errorf("vip %q: %w", v.name(), err)
		}
	}
	return out, nil
}

// Inherit gives the next Apply the sockets an earlier l4lb passed, and what
// it knew of its backends: each VIP listed there takes its socket instead
// of binding one, and its backends start as they were there (see
// BackendState). Apply closes what no VIP took.
func (r *Runtime) Inherit(ls *ListenSockets, backends []BackendState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inherit = ls
	r.carry = map[string]map[l4.BackendID]BackendState{}
	for _, b := range backends {
		if r.carry[b.VIP] == nil {
			r.carry[b.VIP] = map[l4.BackendID]BackendState{}
		}
		r.carry[b.VIP][b.Backend] = b
	}
}

// closeInherited closes the inherited sockets no VIP took (under r.mu).
func (r *Runtime) closeInherited() {
	if n := r.inherit.Len(); n > 0 {
		r.log.Info("inherited sockets of VIPs this config does not have closed", zap.Int("sockets", n))
	}
	r.inherit.Close()
	r.inherit, r.carry = nil, nil
}

// BackendState is what an upgrade carries over of a backend besides its
// flows: that health took it down (it stays out of new flows until the
// new process's probes bring it back), and an operator's override.
type BackendState struct {
	VIP      string         `json:"vip"` // l4.VIPKey.String()
	Backend  l4.BackendID   `json:"backend"`
	Name     string         `json:"name,omitempty"`
	Address  netip.AddrPort `json:"address"`
	Weight   int            `json:"weight"`
	Down     bool           `json:"down,omitempty"`
	Override string         `json:"override,omitempty"` // l4.Override's name
	By       string         `json:"by,omitempty"`
	Since    time.Time      `json:"since,omitempty"`
}

// apply starts nb as the previous process had it: down only where active
// probes can bring it back (with health none nothing would), the
// override only while the file leaves the backend as it was (as a reload
// keeps it).
func (c BackendState) apply(nb *backend, vc *config.VIP) {
	if c.Address != nb.conf.Address {
		return
	}
	if c.Down && vc.Health.Type != l4.CheckNone {
		nb.health = l4.HealthDown
	}
	o, err := l4.ParseOverride(c.Override)
	if err == nil && o != l4.OverrideNone && c.Name == nb.conf.Name && c.Weight == nb.conf.Weight {
		nb.override = overrideState{state: o, by: c.By, since: c.Since}
	}
}

// ExportBackends lists every backend's health and override for the next
// l4lb.
func (r *Runtime) ExportBackends() []BackendState {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []BackendState
	for key, v := range r.vips {
		v.mu.Lock()
		for id, b := range v.backends {
			out = append(out, BackendState{
				VIP: key.String(), Backend: id, Name: b.conf.Name, Address: b.conf.Address, Weight: b.conf.Weight,
				Down: b.health == l4.HealthDown, Override: b.override.state.String(), By: b.override.by, Since: b.override.since,
			})
		}
		v.mu.Unlock()
	}
	return out
}

// PauseAccepting stops (true) or resumes (false) this process taking new
// flows on its proxy VIPs while their sockets stay open for another
// process: TCP listeners leave the loops' epoll sets, UDP sockets are not
// read (their sessions keep relaying replies). Established flows go on.
func (r *Runtime) PauseAccepting(pause bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.vips {
		if h, ok := v.dp.(plane.ListenerHandoff); ok {
			h.PauseAccepting(pause)
		}
	}
}

// HoldXDP stops (true) this process writing the XDP maps while another
// l4lb adopts them (pinned maps are shared: the new process's view must
// win), or resumes (false) and writes every xdp VIP's snapshot again,
// since the other process may have written its own.
func (r *Runtime) HoldXDP(hold bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.xdp == nil {
		return
	}
	r.xdp.Hold(hold)
	if hold {
		return
	}
	for _, v := range r.vips {
		v.guard.Write()
	}
}

// UpgradeBlocker says why this runtime cannot hand over to another
// process, or "" when it can: without pin_path the XDP program's link
// belongs to this process and the next one could not attach beside it.
func (r *Runtime) UpgradeBlocker() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.xdp == nil {
		return ""
	}
	return r.xdp.UpgradeBlocker()
}

// DetachConns takes the established TCP connections of every proxy VIP off
// the event loops for the next l4lb, handing them to emit as they are
// ready, with the pipes that hold their bytes in flight when pipes (the
// next l4lb adopts pipes), else flushed (see proxy.DetachConns):
// accepting must be paused before. Those that could not flush within
// flush, or were still connecting, stay here and drain.
func (r *Runtime) DetachConns(flush time.Duration, pipes bool, emit func([]*proxy.DetachedConn) error) (proxy.HandoverStats, error) {
	r.mu.Lock()
	var ps []proxy.ConnHandoff
	for _, v := range r.vips {
		if p, ok := v.dp.(proxy.ConnHandoff); ok {
			ps = append(ps, p)
		}
	}
	r.mu.Unlock()
	return proxy.DetachPlaneConns(ps, flush, pipes, emit)
}

// Errors an adoption is refused with: the connection stays in the old
// process, which drains it.
var (
	errAdoptNoVIP     = errors.New("no proxy TCP VIP with this address here")
	errAdoptNoBackend = errors.New("its backend is not in this config (or has another address)")
)

// AdoptConn takes over a connection the previous l4lb detached: fds are
// its sockets and pipes (proxy.ConnState.FDCount), owned by the runtime on
// success (the caller closes them on an error). The VIP and the backend
// (same identity and address) must be in this config.
func (r *Runtime) AdoptConn(st proxy.ConnState, fds []int) error {
	v := r.lookupVIP(st.VIP)
	if v == nil {
		return errAdoptNoVIP
	}
	p, ok := v.dp.(proxy.ConnHandoff)
	if !ok {
		return errAdoptNoVIP
	}
	if st.Route != "" { // its backend is the route's
		r.mu.Lock()
		rv, ok := v.routes[st.Route]
		r.mu.Unlock()
		if !ok {
			return errAdoptNoBackend
		}
		v = rv
	}
	v.mu.Lock()
	be, ok := v.backends[st.Backend]
	v.mu.Unlock()
	if !ok || be.b.Addr != st.BackendAddr {
		return errAdoptNoBackend
	}
	return p.AdoptConn(st, fds, be.b)
}

// DetachSessions takes every UDP session of every proxy VIP off the event
// loops for the next l4lb (see proxy.DetachSessions): reading must be
// paused before.
func (r *Runtime) DetachSessions() []*proxy.DetachedSession {
	r.mu.Lock()
	var ps []proxy.SessionHandoff
	for _, v := range r.vips {
		if p, ok := v.dp.(proxy.SessionHandoff); ok {
			ps = append(ps, p)
		}
	}
	r.mu.Unlock()
	return proxy.DetachPlaneSessions(ps)
}

// AdoptSession takes over a UDP session the previous l4lb detached: fd
// is its backend socket, owned by the runtime in every case. The VIP and
// the backend (same identity and address) must be in this config.
func (r *Runtime) AdoptSession(st proxy.SessionState, fd int) error {
	v := r.lookupVIP(st.VIP)
	var p proxy.SessionHandoff
	ok := false
	if v != nil {
		p, ok = v.dp.(proxy.SessionHandoff)
	}
	if !ok {
		proxy.CloseSockets(fd)
		return errAdoptNoVIP
	}
	v.mu.Lock()
	be, ok := v.backends[st.Backend]
	v.mu.Unlock()
	if !ok || be.b.Addr != st.BackendAddr {
		proxy.CloseSockets(fd)
		return errAdoptNoBackend
	}
	return p.AdoptSession(st, fd, be.b)
}

// ResumeReading starts reading the UDP VIP sockets taken from the previous
// l4lb, once its sessions are adopted (a no-op for those read already).
func (r *Runtime) ResumeReading() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.vips {
		if p, ok := v.dp.(proxy.SessionHandoff); ok {
			p.ResumeReading()
		}
	}
}
