// What the proxy planes hold for a client (established connections,
// affinity pins, UDP sessions), read without refreshing anything.

package reconcile

import (
	"fmt"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/l4lb/l4lb/l4/plane"
)

// explain: an established connection from the client's address and
// port, else the affinity pin, else the algorithm.
func (p *tcpPlane) Explain(q *plane.Query) {
	src := q.Flow.Src
	conns := p.svc.ConnsFrom(src.Addr(), src.Port(), plane.MaxListed+1)
	for i, c := range conns {
		if i == plane.MaxListed {
			q.Answer.Notes = append(q.Answer.Notes, fmt.Sprintf("more than %d established connections from %s: the first %d are listed", plane.MaxListed, src.Addr(), plane.MaxListed))
			break
		}
		pin := Pin{Kind: "connection", Flow: plane.FlowString(c.Flow), Backend: *plane.Ref(c.Backend), Decides: q.Port,
			IdleSeconds: plane.Secs(c.Idle), TimeoutSeconds: plane.Secs(p.svc.Settings().IdleTimeout),
			Why: "established: its bytes go to this backend until it ends"}
		if q.Port {
			q.Decided(plane.Ref(c.Backend), "an established connection from this address and port")
		}
		q.Answer.Pinned = append(q.Answer.Pinned, pin)
	}
	if len(conns) == 0 {
		q.Answer.Unpinned = append(q.Answer.Unpinned, "no established connection from "+q.Answer.Client)
	}
	p.explainAffinity(q)
	explainPick(q)
	explainAccess(q, p.svc.Settings().Access)
}

// explainAccess adds the verdict of acl (nil: no lists) for the client.
func explainAccess(q *plane.Query, acl *guard.ACL) {
	if acl != nil {
		r, _ := acl.Match(q.Flow.Src.Addr())
		q.Access(acl.Allowed(q.Flow.Src.Addr()), r.Net, r.Allowed)
	}
}

// explainAffinity reads the client address's pin, when the VIP has
// affinity_timeout, without refreshing it.
func (p *tcpPlane) explainAffinity(q *plane.Query) {
	if p.svc.Settings().AffinityTimeout <= 0 {
		return
	}
	a := p.svc.Affinity()
	if a == nil {
		q.Answer.Notes = append(q.Answer.Notes, "affinity_timeout is set but the pin table could not start: no pins")
		return
	}
	client := q.Flow.Src.Addr()
	pk, ok := a.Peek(p.svc.Key(), client)
	if !ok {
		q.Answer.Unpinned = append(q.Answer.Unpinned, "no affinity entry for "+client.String())
		return
	}
	b := pk.Backend
	pin := Pin{Kind: "affinity", Flow: "client " + client.String(), Backend: *plane.Ref(b), IdleSeconds: plane.Secs(pk.Idle), TimeoutSeconds: plane.Secs(pk.Timeout)}
	if b.Eligible() {
		pin.Why = "a new connection from this address goes to it first (affinity_timeout); a failed connect retries by the algorithm"
		pin.Decides = q.Undecided()
		q.Decided(plane.Ref(b), "affinity pin: the backend this client address used last")
	} else {
		pin.Why = "its backend takes no pinned flows now (down, disabled, weight 0 or removed): the algorithm picks, and the pin moves to its choice"
	}
	q.Answer.Pinned = append(q.Answer.Pinned, pin)
}

// explain: the client's UDP session (its address and port), else the
// algorithm for a new session.
func (p *udpPlane) Explain(q *plane.Query) {
	t := p.svc.Table()
	if q.Port {
		if pk, ok := t.Peek(conntrack.KeyOf(&q.Flow)); ok {
			q.Answer.Pinned = append(q.Answer.Pinned, sessionPin(q, q.Flow, pk, true))
		} else {
			q.Answer.Unpinned = append(q.Answer.Unpinned, "no UDP session for "+q.Answer.Client)
		}
	} else {
		clientSessions(q, t)
	}
	st := p.settings.Load()
	if st.MaxSessions > 0 && p.svc.Sessions() >= int64(st.MaxSessions) && q.Undecided() {
		q.Answer.Notes = append(q.Answer.Notes, fmt.Sprintf("max_sessions (%d) reached: a datagram that would start a new session is dropped", st.MaxSessions))
	}
	explainPick(q)
	explainAccess(q, st.Access)
}

// sessionPin describes a UDP session; exact says it is the flow asked about.
func sessionPin(q *plane.Query, f l4.Flow, pk conntrack.Peeked, exact bool) Pin {
	b := pk.Backend
	pin := Pin{Kind: "session", Flow: plane.FlowString(f), Backend: *plane.Ref(b), IdleSeconds: plane.Secs(pk.Idle), TimeoutSeconds: plane.Secs(pk.Timeout)}
	switch {
	case !b.Eligible():
		pin.Why = "its backend takes no pinned flows now (down, disabled, weight 0 or removed): the next datagram ends the session and the algorithm picks again"
	case exact:
		pin.Why = "datagrams from this address and port go to it until the session is idle for session_timeout"
		pin.Decides = q.Undecided()
		q.Decided(plane.Ref(b), "a UDP session of this address and port")
	default:
		pin.Why = "a session of this client: its datagrams go to this backend until it is idle for session_timeout"
	}
	return pin
}

// clientSessions lists the sessions of the client's address (any port).
func clientSessions(q *plane.Query, t *conntrack.Table) {
	client := q.Flow.Src.Addr()
	n := 0
	t.Range(func(k conntrack.Key, pk conntrack.Peeked) bool {
		if f := k.Flow(); f.Src.Addr() == client {
			if n == plane.MaxListed {
				q.Answer.Notes = append(q.Answer.Notes, fmt.Sprintf("more than %d UDP sessions from %s: the first %d are listed", plane.MaxListed, client, plane.MaxListed))
				return false
			}
			q.Answer.Pinned = append(q.Answer.Pinned, sessionPin(q, f, pk, false))
			n++
		}
		return true
	})
	q.Answer.Unpinned = append(q.Answer.Unpinned, "UDP sessions are per client port: give CLIENT_IP:PORT for the session a datagram would use")
}
