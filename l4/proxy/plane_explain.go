// What the proxy planes hold for a client (established connections,
// affinity pins, UDP sessions), read without refreshing anything, and
// what their algorithm would choose for a new flow.

package proxy

import (
	"fmt"
	"time"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// Explain: an established connection from the client's address and
// port, else the affinity pin, else the algorithm.
func (p *TCPPlane) Explain(q *plane.Query) {
	src := q.Flow.Src
	conns := p.svc.ConnsFrom(src.Addr(), src.Port(), plane.MaxListed+1)
	for i, c := range conns {
		if i == plane.MaxListed {
			q.Answer.Notes = append(q.Answer.Notes, fmt.Sprintf("more than %d established connections from %s: the first %d are listed", plane.MaxListed, src.Addr(), plane.MaxListed))
			break
		}
		pin := plane.Pin{Kind: "connection", Flow: plane.FlowString(c.Flow), Backend: *plane.Ref(c.Backend), Decides: q.Port,
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

// Affinity is the pin table explain reads (nil: no affinity_timeout).
func (p *TCPPlane) Affinity() *conntrack.Affinity { return p.svc.Affinity() }

// Table is the session table explain reads.
func (p *UDPPlane) Table() *conntrack.Table { return p.svc.Table() }

// explainAffinity reads the client address's pin, when the VIP has
// affinity_timeout, without refreshing it.
func (p *TCPPlane) explainAffinity(q *plane.Query) {
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
	pin := plane.Pin{Kind: "affinity", Flow: "client " + client.String(), Backend: *plane.Ref(b), IdleSeconds: plane.Secs(pk.Idle), TimeoutSeconds: plane.Secs(pk.Timeout)}
	if b.Eligible() {
		pin.Why = "a new connection from this address goes to it first (affinity_timeout); a failed connect retries by the algorithm"
		pin.Decides = q.Undecided()
		q.Decided(plane.Ref(b), "affinity pin: the backend this client address used last")
	} else {
		pin.Why = "its backend takes no pinned flows now (down, disabled, weight 0 or removed): the algorithm picks, and the pin moves to its choice"
	}
	q.Answer.Pinned = append(q.Answer.Pinned, pin)
}

// Explain: the client's UDP session (its address and port), else the
// algorithm for a new session.
func (p *UDPPlane) Explain(q *plane.Query) {
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
func sessionPin(q *plane.Query, f l4.Flow, pk conntrack.Peeked, exact bool) plane.Pin {
	b := pk.Backend
	pin := plane.Pin{Kind: "session", Flow: plane.FlowString(f), Backend: *plane.Ref(b), IdleSeconds: plane.Secs(pk.Idle), TimeoutSeconds: plane.Secs(pk.Timeout)}
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

// explainPick is the proxy planes' answer for a new flow: the
// snapshot's algorithm, read without picking.
func explainPick(q *plane.Query) {
	e := q.Answer
	x := q.Snap.Explain(&q.Flow)
	p := &plane.Pick{Rule: x.Rule, Generation: q.Snap.Generation()}
	e.Pick = p
	members := membersOf(q.Snap)
	at := func(i int) *plane.BackendRef {
		if i < 0 || i >= len(members) {
			return nil
		}
		return plane.Ref(members[i].Backend)
	}
	for _, m := range x.Members {
		if c := q.CandidateOf(m.Backend); c != nil {
			c.Share, c.Load, c.OverBound, c.Full, c.MaxFlows = m.Share, m.Load, m.OverBound, m.Full, m.Backend.MaxFlows()
			if q.Algorithm == l4.LeastTime {
				c.RTT, c.RTTSampled, c.Cost = m.RTT, m.RTTSampled, time.Duration(m.Cost)
			}
		}
	}
	for _, i := range x.Tied {
		p.Tied = append(p.Tied, string(members[i].Backend.ID))
	}
	p.Next = at(x.Next)
	if x.Hash != nil {
		p.Hash = hashPath(x.Hash, members, at)
	}
	switch {
	case len(members) == 0:
		q.Decided(nil, "no eligible backend: a new "+flowNoun(q.Flow.Proto)+" is refused")
	case x.Hash != nil && plane.PortMatters(x.Hash.Key) && !q.Port:
		p.Hash.Maglev, p.Hash.Ring, p.Hash.Owner, p.Hash.Skipped, p.Hash.Fallback = nil, nil, nil, nil, false
		q.Decided(nil, fmt.Sprintf("hash_key %s covers the client port, which was not given: each port hashes on its own (give CLIENT_IP:PORT)", x.Hash.Key))
	case x.Chosen >= 0:
		p.Backend = at(x.Chosen)
		q.Decided(p.Backend, pickBecause(x, p))
	case len(x.Tied) > 0:
		q.Decided(nil, fmt.Sprintf("%s: a tie between %v at the lowest score, broken at random", q.Algorithm, p.Tied))
	case x.Algorithm == l4.RoundRobin:
		q.Decided(nil, fmt.Sprintf("round_robin rotates: the VIP's next new flow, from whichever client, goes to %s", p.Next.ID))
	default:
		q.Decided(nil, fmt.Sprintf("%s: chance decides (see the shares)", q.Algorithm))
	}
}

// hashPath converts a balance hash path.
func hashPath(h *balance.HashPath, members []balance.Member, at func(int) *plane.BackendRef) *plane.HashPath {
	hp := &plane.HashPath{Key: h.Key.String(), Hash: plane.Hex(h.Hash), Owner: at(h.Owner), BalanceFactor: h.BalanceFactor, Fallback: h.Fallback}
	if h.TableSize > 0 {
		hp.Maglev = &plane.MaglevPath{Slot: h.Slot, TableSize: h.TableSize, Source: "snapshot"}
	} else {
		hp.Ring = &plane.RingPath{Point: h.Point, Points: h.Points, Position: plane.Hex(h.Position), Vnodes: h.Vnodes}
	}
	for _, i := range h.Skipped {
		hp.Skipped = append(hp.Skipped, string(members[i].Backend.ID))
	}
	return hp
}

// membersOf returns a snapshot's members (none before the first).
func membersOf(s *snapshot.Snapshot) []balance.Member {
	if s == nil {
		return nil
	}
	return s.Members
}

// pickBecause is the one line for a deterministic choice.
func pickBecause(x balance.Explanation, p *plane.Pick) string {
	h := p.Hash
	switch {
	case h != nil && h.Maglev != nil:
		s := fmt.Sprintf("maglev: hash %s -> slot %d of %d (generation %d)", h.Hash, h.Maglev.Slot, h.Maglev.TableSize, p.Generation)
		return s + bound(h, p)
	case h != nil && h.Ring != nil:
		s := fmt.Sprintf("source_hash: hash %s -> ring point %d of %d", h.Hash, h.Ring.Point, h.Ring.Points)
		return s + bound(h, p)
	case len(x.Members) == 1:
		return "the only eligible backend"
	case x.Algorithm == l4.LeastConn:
		return "least_conn: fewest live flows per weight"
	case x.Algorithm == l4.LeastTime:
		return "least_time: lowest (live flows + 1) x (RTT + bias) per weight"
	}
	return x.Rule
}

// bound adds the load bound's effect to a hash line.
func bound(h *plane.HashPath, p *plane.Pick) string {
	switch {
	case h.Fallback:
		return fmt.Sprintf("; every backend early in its sequence was over the load bound (%d%%), a scan chose %s", h.BalanceFactor, p.Backend.ID)
	case len(h.Skipped) > 0 && h.BalanceFactor == 0:
		return fmt.Sprintf("; %v at max_conns, passed by", h.Skipped)
	case len(h.Skipped) > 0:
		return fmt.Sprintf("; %v over the load bound (%d%%) or at max_conns, passed by", h.Skipped, h.BalanceFactor)
	}
	return ""
}

func flowNoun(p l4.Protocol) string {
	if p == l4.UDP {
		return "session's datagram"
	}
	return "connection"
}
