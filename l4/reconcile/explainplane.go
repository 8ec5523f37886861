// What the proxy planes hold for a client (established connections,
// affinity pins, UDP sessions), read without refreshing anything.

package reconcile

import (
	"fmt"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
)

// maxListed bounds the flows listed for a client given without a port.
const maxListed = 16

// explain: an established connection from the client's address and
// port, else the affinity pin, else the algorithm.
func (p *tcpPlane) explain(q *explainQuery) {
	src := q.f.Src
	conns := p.svc.ConnsFrom(src.Addr(), src.Port(), maxListed+1)
	for i, c := range conns {
		if i == maxListed {
			q.e.Notes = append(q.e.Notes, fmt.Sprintf("more than %d established connections from %s: the first %d are listed", maxListed, src.Addr(), maxListed))
			break
		}
		pin := Pin{Kind: "connection", Flow: flowString(c.Flow), Backend: *ref(c.Backend), Decides: q.port,
			IdleSeconds: secs(c.Idle), TimeoutSeconds: secs(q.vc.IdleTimeout),
			Why: "established: its bytes go to this backend until it ends"}
		if q.port {
			q.decided(ref(c.Backend), "an established connection from this address and port")
		}
		q.e.Pinned = append(q.e.Pinned, pin)
	}
	if len(conns) == 0 {
		q.e.Unpinned = append(q.e.Unpinned, "no established connection from "+q.e.Client)
	}
	p.explainAffinity(q)
	q.explainPick()
}

// explainAffinity reads the client address's pin, when the VIP has
// affinity_timeout, without refreshing it.
func (p *tcpPlane) explainAffinity(q *explainQuery) {
	if q.vc.AffinityTimeout <= 0 {
		return
	}
	a := p.svc.Affinity()
	if a == nil {
		q.e.Notes = append(q.e.Notes, "affinity_timeout is set but the pin table could not start: no pins")
		return
	}
	client := q.f.Src.Addr()
	pk, ok := a.Peek(p.svc.Key(), client)
	if !ok {
		q.e.Unpinned = append(q.e.Unpinned, "no affinity entry for "+client.String())
		return
	}
	b := pk.Backend
	pin := Pin{Kind: "affinity", Flow: "client " + client.String(), Backend: *ref(b), IdleSeconds: secs(pk.Idle), TimeoutSeconds: secs(pk.Timeout)}
	if b.Eligible() {
		pin.Why = "a new connection from this address goes to it first (affinity_timeout); a failed connect retries by the algorithm"
		pin.Decides = q.decide == ""
		q.decided(ref(b), "affinity pin: the backend this client address used last")
	} else {
		pin.Why = "its backend takes no pinned flows now (down, disabled, weight 0 or removed): the algorithm picks, and the pin moves to its choice"
	}
	q.e.Pinned = append(q.e.Pinned, pin)
}

// explain: the client's UDP session (its address and port), else the
// algorithm for a new session.
func (p *udpPlane) explain(q *explainQuery) {
	t := p.svc.Table()
	if q.port {
		if pk, ok := t.Peek(conntrack.KeyOf(&q.f)); ok {
			q.e.Pinned = append(q.e.Pinned, q.sessionPin(q.f, pk, true))
		} else {
			q.e.Unpinned = append(q.e.Unpinned, "no UDP session for "+q.e.Client)
		}
	} else {
		q.clientSessions(t)
	}
	if st := q.vc; st.MaxSessions > 0 && p.svc.Sessions() >= int64(st.MaxSessions) && q.decide == "" {
		q.e.Notes = append(q.e.Notes, fmt.Sprintf("max_sessions (%d) reached: a datagram that would start a new session is dropped", st.MaxSessions))
	}
	q.explainPick()
}

// sessionPin describes a UDP session; exact says it is the flow asked about.
func (q *explainQuery) sessionPin(f l4.Flow, pk conntrack.Peeked, exact bool) Pin {
	b := pk.Backend
	pin := Pin{Kind: "session", Flow: flowString(f), Backend: *ref(b), IdleSeconds: secs(pk.Idle), TimeoutSeconds: secs(pk.Timeout)}
	switch {
	case !b.Eligible():
		pin.Why = "its backend takes no pinned flows now (down, disabled, weight 0 or removed): the next datagram ends the session and the algorithm picks again"
	case exact:
		pin.Why = "datagrams from this address and port go to it until the session is idle for session_timeout"
		pin.Decides = q.decide == ""
		q.decided(ref(b), "a UDP session of this address and port")
	default:
		pin.Why = "a session of this client: its datagrams go to this backend until it is idle for session_timeout"
	}
	return pin
}

// clientSessions lists the sessions of the client's address (any port).
func (q *explainQuery) clientSessions(t *conntrack.Table) {
	client := q.f.Src.Addr()
	n := 0
	t.Range(func(k conntrack.Key, pk conntrack.Peeked) bool {
		if f := k.Flow(); f.Src.Addr() == client {
			if n == maxListed {
				q.e.Notes = append(q.e.Notes, fmt.Sprintf("more than %d UDP sessions from %s: the first %d are listed", maxListed, client, maxListed))
				return false
			}
			q.e.Pinned = append(q.e.Pinned, q.sessionPin(f, pk, false))
			n++
		}
		return true
	})
	q.e.Unpinned = append(q.e.Unpinned, "UDP sessions are per client port: give CLIENT_IP:PORT for the session a datagram would use")
}
