// Explain: which backend a client's flow has or would get on a VIP, and
// why (l4lb explain). Read-only: nothing is acquired, refreshed or moved.

package reconcile

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// Explain says which backend client's flow on the VIP called vipName has
// or would get, and why. client's port is 0 when none was given. It
// changes nothing: no flow acquired, no rotation advanced, no pin or
// conntrack entry created or refreshed.
func (r *Runtime) Explain(vipName string, client netip.AddrPort) (Explanation, error) {
	v := r.vipNamed(vipName)
	if v == nil {
		return Explanation{}, fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	if err := reachable(v.key, client.Addr()); err != nil {
		return Explanation{}, err
	}
	return v.explain(client), nil
}

// reachable refuses a client of the other address family than a VIP on
// a specific (or an IPv4 wildcard) address: no such flow can reach it.
func reachable(k l4.VIPKey, client netip.Addr) error {
	vip := k.Addr.Addr()
	if client.Is4() == vip.Is4() || (vip.Is6() && vip.IsUnspecified()) {
		return nil
	}
	return fmt.Errorf("%w: %s cannot reach VIP %s (another address family)", ErrBadClient, client, k.Addr)
}

// explainQuery is one question, as the data planes see it.
type explainQuery struct {
	f      l4.Flow // client to the VIP's address
	port   bool    // the client's port was given
	vc     *config.VIP
	snap   *snapshot.Snapshot
	e      *Explanation
	byPtr  map[*l4.Backend]*Candidate // the candidates by backend
	decide string                     // what decided e.Backend, once something did
}

// explain composes the answer: the VIP, its candidates, then what its
// data plane holds and chooses.
func (v *vip) explain(client netip.AddrPort) Explanation {
	vc := v.cfg()
	f := l4.Flow{Src: client, Dst: v.key.Addr, Proto: v.key.Proto}
	e := Explanation{
		VIP: vc.Name, Listen: v.key.Addr.String(), Protocol: v.key.Proto.String(), Mode: vc.Mode.String(),
		Algorithm: vc.Algorithm.String(), Client: client.Addr().String(), Flow: flowString(f),
	}
	if client.Port() != 0 {
		e.Client = client.String()
	} else {
		e.Flow = f.Proto.String() + " " + strings.TrimSuffix(f.Src.String(), ":0") + ":*->" + f.Dst.String() // any port
	}
	if vc.Algorithm.Hashing() && vc.Mode == l4.ModeProxy {
		e.HashKey = vc.HashKey.String()
	}
	q := &explainQuery{f: f, port: client.Port() != 0, vc: vc, snap: v.store.Load(), e: &e}
	v.candidates(q)
	if v.key.Addr.Addr().IsUnspecified() {
		e.Notes = append(e.Notes, fmt.Sprintf("the VIP listens on the wildcard address %s: UDP session keys and a 5tuple hash hold the address the client sent to, which is not known here; %s stands in for it", v.key.Addr.Addr(), v.key.Addr.Addr()))
	}
	v.dp.explain(q)
	if e.Because == "" {
		e.Because = "no backend: none is eligible"
	}
	explainAccess(vc, client.Addr(), &e)
	return e
}

// explainAccess adds the VIP's allow/deny verdict: a refused client's new
// flows reach no backend (its established ones, if any, still decide).
func explainAccess(vc *config.VIP, client netip.Addr, e *Explanation) {
	acl, err := accessList(vc)
	if err != nil || acl == nil {
		return
	}
	verdict := "allowed"
	if !acl.Allowed(client) {
		verdict = "refused"
	}
	if r, ok := acl.Match(client); ok {
		list := "deny"
		if r.Allowed {
			list = "allow"
		}
		e.Access = fmt.Sprintf("%s by %s %s", verdict, list, r.Net)
	} else if verdict == "allowed" {
		e.Access = "allowed: in no list, and the VIP has no allow list"
	} else {
		e.Access = "refused: not in the VIP's allow list"
	}
	if verdict == "allowed" {
		return
	}
	for _, p := range e.Pinned {
		if p.Decides {
			return
		}
	}
	e.Backend, e.Because = nil, "no backend: the client is "+e.Access
}

// flowString formats a flow as the logs do: "tcp 198.18.0.50:40000->198.18.0.10:5432".
func flowString(f l4.Flow) string {
	return f.Proto.String() + " " + f.Src.String() + "->" + f.Dst.String()
}

func ref(b *l4.Backend) *BackendRef {
	return &BackendRef{ID: string(b.ID), Address: b.Addr.String(), Index: b.Index}
}

// candidates lists every backend of the VIP with its state and why it
// takes no new flows when it does not.
func (v *vip) candidates(q *explainQuery) {
	effective := map[*l4.Backend]uint32{}
	for _, m := range membersOf(q.snap) {
		effective[m.Backend] = m.Weight
	}
	v.mu.Lock()
	all := make([]*backend, 0, len(v.backends)+len(v.retired))
	for _, b := range v.backends {
		all = append(all, b)
	}
	retired := len(all)
	for _, b := range v.retired {
		if b.b.LiveFlows() > 0 { // as status lists them
			all = append(all, b)
		}
	}
	for i, b := range all {
		w, in := effective[b.b]
		c := plane.NewCandidate(b.b)
		c.Weight, c.EffectiveWeight, c.Health, c.Candidate = b.weight, w, b.health.String(), in
		if b.override.state != l4.OverrideNone {
			c.Override = b.override.state.String()
		}
		if scalesWeights(q.vc) && in {
			c.EffectiveWeight, c.Scale = (w+50)/100, max(b.scale, 0) // hundredths (effectiveMembers)
			if c.Scale == 0 {
				c.Scale = 1
			}
		}
		c.Why = whyNot(b, in, i >= retired)
		if c.Why == "eligible, but not in the snapshot yet" && b.conf.Backup {
			c.Why = "backup: standing by while a primary (or, with backup_mode first, an earlier backup) serves"
		}
		q.e.Candidates = append(q.e.Candidates, c)
	}
	v.mu.Unlock()
	slices.SortFunc(q.e.Candidates, func(a, b Candidate) int { return cmp.Compare(a.ID, b.ID) })
	q.byPtr = map[*l4.Backend]*Candidate{}
	for i := range q.e.Candidates {
		q.byPtr[q.e.Candidates[i].Backend()] = &q.e.Candidates[i]
	}
}

// whyNot says why b takes no new flows, and what becomes of the flows
// pinned to it; "" when it is a candidate.
func whyNot(b *backend, candidate, removed bool) string {
	switch {
	case removed:
		return "removed by a reload: no new flows; listed while its flows last"
	case b.override.state == l4.OverrideDisable:
		return "disabled by " + b.override.by + ": no new flows, pinned flows move"
	case b.override.state == l4.OverrideDrain && b.keepsPinned():
		return "drained by " + b.override.by + ": no new flows; established flows and pins stay"
	case b.override.state == l4.OverrideDrain:
		return "drained by " + b.override.by + " and " + whyIneligible(b)
	case !b.eligible():
		return whyIneligible(b)
	case !candidate:
		return "eligible, but not in the snapshot yet"
	}
	return ""
}

func whyIneligible(b *backend) string {
	if b.health == l4.HealthDown {
		return "down: no new flows; pinned flows move on their next packet"
	}
	return "weight 0: no new flows; pinned flows move on their next packet"
}

// decided records the answer: b (nil: none) because of why.
func (q *explainQuery) decided(b *BackendRef, why string) {
	if q.decide != "" {
		return
	}
	q.decide = why
	q.e.Backend, q.e.Because = b, why
}

// portMatters reports whether the flow hash covers the client port.
func portMatters(k l4.HashKey) bool { return k != l4.HashSrcIP }

// explainPick is the proxy planes' answer for a new flow: the
// snapshot's algorithm, read without picking.
func (q *explainQuery) explainPick() {
	e, vc := q.e, q.vc
	x := q.snap.Explain(&q.f)
	p := &Pick{Rule: x.Rule, Generation: q.snap.Generation()}
	e.Pick = p
	members := membersOf(q.snap)
	at := func(i int) *BackendRef {
		if i < 0 || i >= len(members) {
			return nil
		}
		return ref(members[i].Backend)
	}
	for _, m := range x.Members {
		if c := q.byPtr[m.Backend]; c != nil {
			c.Share, c.Load, c.OverBound, c.Full, c.MaxFlows = m.Share, m.Load, m.OverBound, m.Full, m.Backend.MaxFlows()
			if vc.Algorithm == l4.LeastTime {
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
		q.decided(nil, "no eligible backend: a new "+flowNoun(q.f.Proto)+" is refused")
	case x.Hash != nil && portMatters(x.Hash.Key) && !q.port:
		p.Hash.Maglev, p.Hash.Ring, p.Hash.Owner, p.Hash.Skipped, p.Hash.Fallback = nil, nil, nil, nil, false
		q.decided(nil, fmt.Sprintf("hash_key %s covers the client port, which was not given: each port hashes on its own (give CLIENT_IP:PORT)", x.Hash.Key))
	case x.Chosen >= 0:
		p.Backend = at(x.Chosen)
		q.decided(p.Backend, pickBecause(x, p))
	case len(x.Tied) > 0:
		q.decided(nil, fmt.Sprintf("%s: a tie between %v at the lowest score, broken at random", vc.Algorithm, p.Tied))
	case x.Algorithm == l4.RoundRobin:
		q.decided(nil, fmt.Sprintf("round_robin rotates: the VIP's next new flow, from whichever client, goes to %s", p.Next.ID))
	default:
		q.decided(nil, fmt.Sprintf("%s: chance decides (see the shares)", vc.Algorithm))
	}
}

// hashPath converts a balance hash path.
func hashPath(h *balance.HashPath, members []balance.Member, at func(int) *BackendRef) *HashPath {
	hp := &HashPath{Key: h.Key.String(), Hash: hex(h.Hash), Owner: at(h.Owner), BalanceFactor: h.BalanceFactor, Fallback: h.Fallback}
	if h.TableSize > 0 {
		hp.Maglev = &MaglevPath{Slot: h.Slot, TableSize: h.TableSize, Source: "snapshot"}
	} else {
		hp.Ring = &RingPath{Point: h.Point, Points: h.Points, Position: hex(h.Position), Vnodes: h.Vnodes}
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

func hex(u uint64) string { return "0x" + strconv.FormatUint(u, 16) }

// pickBecause is the one line for a deterministic choice.
func pickBecause(x balance.Explanation, p *Pick) string {
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
func bound(h *HashPath, p *Pick) string {
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

// secs is d in seconds, to the millisecond.
func secs(d time.Duration) float64 { return d.Round(time.Millisecond).Seconds() }
