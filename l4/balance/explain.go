// Explaining a pick: what Pick would do for a flow at this moment, and why, without doing it.

package balance

import (
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Explainer is implemented by every Picker that New returns. Explain says
// what Pick would do for f now, and changes nothing: no live flow is
// acquired, no rotation advances, nothing random is drawn. It is for an
// operator's question (l4lb explain), not for the data path: it allocates.
type Explainer interface {
	Explain(f *l4.Flow) Explanation
}

// Explanation is an algorithm's answer for one flow, read from live
// counts at one moment: a count that changes after it can change a
// least-loaded answer.
type Explanation struct {
	Algorithm l4.Algorithm
	// Rule says how the algorithm chooses, in one sentence.
	Rule string
	// Chosen is the member (an index into the members given to New) that
	// Pick would return for the flow now; -1 when chance or other flows
	// decide (round_robin, random, p2c, a tie), or when there is no member.
	Chosen int
	// Tied lists the members that share the best score when a random scan
	// start decides between them (least_conn, least_time): Pick returns
	// one of them.
	Tied []int
	// Next is, for round_robin, the member that the VIP's next pick goes
	// to, whichever flow makes it; -1 for the other algorithms.
	Next int
	// Hash is how a hashing algorithm (maglev, source_hash) placed the flow.
	Hash *HashPath
	// Members describes every member, in member order.
	Members []MemberScore
}

// MemberScore is one member as the algorithm sees it.
type MemberScore struct {
	Backend *l4.Backend
	Weight  uint32 // effective weight
	// LiveFlows is the backend's live flow count when it was read.
	LiveFlows int64
	// Share is Weight over the sum of the weights: the member's share of
	// new flows (round_robin, random), of draws (p2c), of table slots
	// (maglev) or, within a few percent, of the ring (source_hash).
	Share float64
	// Load is what the least-loaded rules compare, lower wins: live flows
	// per weight (least_conn, p2c), Cost per weight (least_time).
	Load float64
	// RTT is the handshake time least_time scores with: the backend's
	// EWMA, or the configured default while RTTSampled is false.
	RTT        time.Duration
	RTTSampled bool
	// Cost is least_time's (live flows + 1) x (RTT + bias), in ns.
	Cost uint64
	// OverBound: a hashing algorithm with a balance factor passes the
	// member by (it carries more than its bound).
	OverBound bool
	// Full: the member is at its cap on live flows (max_conns,
	// max_sessions); every algorithm skips it as a tried one.
	Full bool
}

// HashPath is how a hashing algorithm placed a flow.
type HashPath struct {
	Key  l4.HashKey
	Hash uint64 // FlowHash(f, Key)
	// Maglev: the flow's slot of a table of TableSize slots.
	Slot, TableSize int
	// Source hash: the first of Points ring points at or after the hash
	// (wrapping), at Position, is point Point; its member has Vnodes
	// points in all.
	Point, Points int
	Position      uint64
	Vnodes        int
	// Owner is the member that owns the slot or point: the flow's backend
	// unless the load bound passes it by.
	Owner int
	// BalanceFactor is the load bound in percent of the fair share; 0 =
	// unbounded.
	BalanceFactor uint32
	// Skipped lists the members the key's sequence reached before Chosen
	// that were over the bound or at their cap, in the order met.
	Skipped []int
	// Fallback: no member within the bound among the sequence's first
	// entries; a scan from a key-derived start chose.
	Fallback bool
}

// Rules, as Explanation.Rule gives them.
const (
	ruleRoundRobin = "smooth weighted round robin: each new flow takes the next entry of one fixed sequence in which every backend appears in proportion to its weight"
	ruleLeastConn  = "least connections: the fewest live flows per unit of weight; a tie goes to whichever tied backend a random scan start meets first"
	ruleP2C        = "power of two choices: two backends are drawn at random in proportion to their weights, and the one with fewer live flows per unit of weight takes the flow (the first drawn on a tie)"
	ruleLeastTime  = "least time: the lowest (live flows + 1) x (handshake RTT + bias) per unit of weight; a tie goes to whichever tied backend a random scan start meets first"
	ruleRandom     = "weighted random: each new flow draws a backend at random in proportion to its weight"
	ruleRing       = "consistent hash ring: the flow hash goes to the first virtual node at or after it"
	ruleMaglev     = "Maglev: the flow hash selects a slot of the lookup table, and the slot's backend takes the flow"
	ruleBound      = "; a backend over the load bound is passed by for the next one in the key's own sequence"
	ruleNone       = "no eligible backend: new flows are refused"
	ruleFull       = "; a backend at its max_conns (max_sessions) is skipped as if tried"
)

// explanation starts an answer over the pool: every member with its
// weight, share and live flows.
func (p *pool) explanation(a l4.Algorithm, rule string) Explanation {
	e := Explanation{Algorithm: a, Rule: rule, Chosen: -1, Next: -1, Members: make([]MemberScore, len(p.backends))}
	var sum uint64
	for _, w := range p.weights {
		sum += w
	}
	full := false
	for i, b := range p.backends {
		e.Members[i] = MemberScore{Backend: b, Weight: uint32(p.weights[i]), LiveFlows: b.LiveFlows(), Share: float64(p.weights[i]) / float64(sum), Full: b.Full()}
		full = full || e.Members[i].Full
	}
	if full {
		e.Rule += ruleFull
	}
	if len(p.backends) == 1 && !full {
		e.Chosen = 0 // whatever the rule, the one member takes the flow
	}
	return e
}

// Explain for round_robin: the sequence's next entry, read without
// taking it.
func (r *roundRobin) Explain(*l4.Flow) Explanation {
	e := r.explanation(l4.RoundRobin, ruleRoundRobin)
	e.Next = int(r.seq[(r.next.Load()+1)%uint64(len(r.seq))])
	return e
}

// Explain for random: chance decides.
func (r *random) Explain(*l4.Flow) Explanation { return r.explanation(l4.Random, ruleRandom) }

// Explain for p2c: chance picks the pair, loads decide within it.
func (p *p2c) Explain(*l4.Flow) Explanation {
	e := p.explanation(l4.P2C, ruleP2C)
	p.fillLoads(&e)
	return e
}

// Explain for least_conn: the member with the fewest live flows per
// weight, or the tie.
func (p *leastConn) Explain(*l4.Flow) Explanation {
	e := p.explanation(l4.LeastConn, ruleLeastConn)
	p.fillLoads(&e)
	flows := make([]uint64, len(e.Members))
	for i := range e.Members {
		flows[i] = min(flowsOf(e.Members[i].LiveFlows), loadCap)
	}
	e.decide(flows, p.weights)
	return e
}

// fillLoads sets each member's live flows per weight.
func (p *pool) fillLoads(e *Explanation) {
	for i := range e.Members {
		m := &e.Members[i]
		m.Load = float64(flowsOf(m.LiveFlows)) / float64(m.Weight)
	}
}

// Explain for least_time: the lowest cost per weight, or the tie.
func (p *leastTime) Explain(*l4.Flow) Explanation {
	e := p.explanation(l4.LeastTime, ruleLeastTime)
	costs := make([]uint64, len(e.Members))
	for i, b := range p.backends {
		m := &e.Members[i]
		m.RTT, m.RTTSampled = b.RTT().Value()
		if !m.RTTSampled {
			m.RTT = time.Duration(p.def)
		}
		costs[i] = p.cost(b)
		m.Cost, m.Load = costs[i], float64(costs[i])/float64(m.Weight)
	}
	e.decide(costs, p.weights)
	return e
}

// decide sets Chosen to the member with the lowest score per weight, or
// Tied to the members that share it, comparing as Pick does (exact
// cross-multiplication, members at their cap left out).
func (e *Explanation) decide(score, weight []uint64) {
	best := -1
	for i := range score {
		if !e.Members[i].Full && (best < 0 || lessRatio(score[i], weight[i], score[best], weight[best])) {
			best = i
		}
	}
	if best < 0 {
		return
	}
	var tied []int
	for i := range score {
		if !e.Members[i].Full && !lessRatio(score[best], weight[best], score[i], weight[i]) {
			tied = append(tied, i) // not above the best: equal
		}
	}
	if len(tied) == 1 {
		e.Chosen = best
		return
	}
	e.Chosen, e.Tied = -1, tied
}

// Explain for maglev: the flow's slot, its owner, and the load bound's
// walk when there is one.
func (p *maglev) Explain(f *l4.Flow) Explanation {
	key := flowHash(f, p.key)
	slot := reduce(key, len(p.table))
	e := p.explanation(l4.Maglev, ruleMaglev)
	e.Hash = &HashPath{Key: p.key, Hash: key, Slot: slot, TableSize: len(p.table), Owner: int(p.table[slot])}
	p.explainWalk(&e, p.table, slot, key)
	return e
}

// Explain for source_hash: the ring point the flow hash reaches, its
// owner, and the load bound's walk when there is one.
func (r *ring) Explain(f *l4.Flow) Explanation {
	key := flowHash(f, r.key)
	pt := r.lookup(key)
	e := r.explanation(l4.SourceHash, ruleRing)
	owner := int(r.owner[pt])
	vnodes := 0
	for _, o := range r.owner {
		if int(o) == owner {
			vnodes++
		}
	}
	e.Hash = &HashPath{Key: r.key, Hash: key, Point: pt, Points: len(r.points), Position: r.points[pt], Vnodes: vnodes, Owner: owner}
	r.explainWalk(&e, r.owner, pt, key)
	return e
}

// explainWalk is walk (bound.go) for a first pick, without taking: the
// member chosen, and those the bound passed by on the way.
func (h *hashed) explainWalk(e *Explanation, seq []uint32, start int, key uint64) {
	e.Hash.BalanceFactor = uint32(h.factor)
	if i := int(seq[start]); h.factor == 0 && !e.Members[i].Full {
		e.Chosen = i
		return
	}
	total := int64(-1)
	if h.factor > 0 {
		e.Rule += ruleBound
		for i := range e.Members {
			e.Members[i].OverBound = !e.Members[i].Full && !h.eligible(i, nil, &total)
		}
	}
	last := -1
	for k := 0; k < min(len(seq), hashWalkMax); k++ {
		i := int(seq[wrap(start+k, len(seq))])
		if i == last {
			continue
		}
		last = i
		if h.eligible(i, nil, &total) {
			e.Chosen = i
			return
		}
		e.Hash.Skipped = appendNew(e.Hash.Skipped, i)
	}
	e.Hash.Fallback = true
	n := len(h.backends)
	first := reduce(mix64(key^seedPick), n)
	for k := 0; k < n; k++ {
		if i := wrap(first+k, n); h.eligible(i, nil, &total) {
			e.Chosen = i
			return
		}
	}
	e.Chosen = h.firstUntried(first, nil) // Pick's last resort: the first member below its cap (-1: none)
}

// appendNew appends i unless s holds it.
func appendNew(s []int, i int) []int {
	for _, x := range s {
		if x == i {
			return s
		}
	}
	return append(s, i)
}

// Explain for an empty member list.
func (none) Explain(*l4.Flow) Explanation {
	return Explanation{Rule: ruleNone, Chosen: -1, Next: -1}
}
