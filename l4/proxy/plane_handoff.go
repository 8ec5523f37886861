// An upgrade through the planes: the optional interfaces of the planes
// whose connections and sessions move to the next l4lb.

package proxy

import (
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// ConnHandoff is a plane whose established TCP connections can move to
// the next l4lb in an upgrade: TCPPlane. (Its state, ConnState, is this
// package's wire format, so the interface lives here, not in l4/plane.)
type ConnHandoff interface {
	plane.Plane
	// AdoptConn takes over a connection the previous l4lb detached: fds
	// are its sockets and pipes, b its backend here.
	AdoptConn(st ConnState, fds []int, b *l4.Backend) error
	tcpService() *TCPService
}

// SessionHandoff is a plane whose UDP sessions can move to the next l4lb
// in an upgrade: UDPPlane.
type SessionHandoff interface {
	plane.Plane
	// AdoptSession takes over a session the previous l4lb detached: fd is
	// its backend socket, owned by the plane in every case.
	AdoptSession(st SessionState, fd int, b *l4.Backend) error
	// ResumeReading starts reading the VIP sockets taken from the
	// previous l4lb, once its sessions are adopted.
	ResumeReading()
	udpService() *UDPService
}

// DetachPlaneConns is DetachConns over the services of ps.
func DetachPlaneConns(ps []ConnHandoff, flush time.Duration, pipes bool, emit func([]*DetachedConn) error) (HandoverStats, error) {
	svcs := make([]*TCPService, len(ps))
	for i, p := range ps {
		svcs[i] = p.tcpService()
	}
	return DetachConns(svcs, flush, pipes, emit)
}

// DetachPlaneSessions is DetachSessions over the services of ps.
func DetachPlaneSessions(ps []SessionHandoff) []*DetachedSession {
	svcs := make([]*UDPService, len(ps))
	for i, p := range ps {
		svcs[i] = p.udpService()
	}
	return DetachSessions(svcs)
}
