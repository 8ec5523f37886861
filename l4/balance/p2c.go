// p2c: power of two random choices, drawn by weight, compared on live flows per weight.

package balance

import (
	"math/rand/v2"

	"github.com/l4lb/l4lb/l4"
)

// p2c draws two candidates and keeps the one with fewer live flows per
// weight: O(1) at any member count, and nearly as even as least_conn.
// Candidates are drawn by weight (the alias table), and a tie keeps the
// first draw, so an idle VIP (all counts zero) is still shared by weight.
// math/rand/v2's top-level functions read a per-thread generator: no lock,
// no allocation.
type p2c struct {
	pool
	alias aliasTable
}

func newP2C(members []Member) *p2c {
	p := &p2c{pool: newPool(members)}
	p.alias = newAliasTable(p.weights)
	return p
}

func (p *p2c) Pick(_ *l4.Flow, tried *Tried) *l4.Backend {
	if n := len(p.backends); tried.Len() == 0 && n > 1 {
		r := rand.Uint64() // one draw, two candidates
		i, j := p.alias.sample(uint32(r)), p.alias.sample(uint32(r>>32))
		if j == i {
			j = wrap(i+1+rand.IntN(n-1), n)
		}
		bi, bj := p.backends[i], p.backends[j]
		if !bi.Limited() && !bj.Limited() { // the common case, as before caps
			if lessRatio(flowsOf(bj.LiveFlows()), p.weights[j], flowsOf(bi.LiveFlows()), p.weights[i]) {
				bi = bj
			}
			bi.Acquire()
			return bi
		}
	}
	for range pickRaces {
		i := p.choose(tried)
		if i < 0 {
			return nil
		}
		if b := p.take(i); b != nil {
			return b
		}
	}
	return nil
}

// choose draws two candidates and returns the less loaded one below its
// cap; when both are at their caps (or on a retry) it scans.
func (p *p2c) choose(tried *Tried) int {
	n := len(p.backends)
	if tried.Len() > 0 || n == 1 {
		// Retries are rare: take the least loaded untried member.
		return p.leastLoaded(rand.IntN(n), tried)
	}
	r := rand.Uint64() // one draw, two candidates
	i, j := p.alias.sample(uint32(r)), p.alias.sample(uint32(r>>32))
	if j == i {
		// A heavy member is often drawn twice; compare with any other.
		j = wrap(i+1+rand.IntN(n-1), n)
	}
	fi, fj := p.backends[i].Full(), p.backends[j].Full()
	switch {
	case fi && fj:
		return p.leastLoaded(rand.IntN(n), tried)
	case fi, !fj && lessRatio(flowsOf(p.backends[j].LiveFlows()), p.weights[j],
		flowsOf(p.backends[i].LiveFlows()), p.weights[i]):
		return j
	}
	return i
}
