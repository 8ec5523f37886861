// least_time: lowest (live flows + 1) x handshake RTT per weight, compared in 128-bit integers.

package balance

import (
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/l4lb/l4lb/l4"
)

// leastTime scores each member (live flows + 1) x RTT / weight and picks
// the lowest. The +1 counts the flow being placed, so an idle fast backend
// beats an idle slow one, while a fast backend's growing load sends traffic
// to the slower ones too: at equilibrium flows are proportional to
// weight / RTT. A backend with no RTT sample yet is scored with a default,
// so it neither wins everything (a zero RTT would) nor nothing.
type leastTime struct {
	pool
	def  uint64 // RTT in ns assumed without a sample
	bias uint64 // ns added to every RTT: a per-flow cost independent of distance
}

func newLeastTime(members []Member, def, bias uint64) *leastTime {
	return &leastTime{pool: newPool(members), def: def, bias: bias}
}

func (p *leastTime) Pick(_ *l4.Flow, tried *Tried) *l4.Backend {
	i := p.choose(tried)
	if i >= 0 {
		if b := p.takeUncapped(i); b != nil {
			return b // the common case, inline
		}
	}
	for range pickRaces {
		if i < 0 {
			return nil
		}
		if b := p.take(i); b != nil {
			return b
		}
		i = p.choose(tried)
	}
	return nil
}

// choose returns the member of lowest cost that is untried and below its
// cap, or -1.
func (p *leastTime) choose(tried *Tried) int {
	n := len(p.backends)
	check := tried.Len() > 0
	start := rand.IntN(n) // ties rotate, as in least_conn
	best := p.scanFrom(start, tried, check, false)
	if best >= 0 && p.backends[best].Full() { // as leastLoaded: caps checked on the winner
		best = p.scanFrom(start, tried, check, true)
	}
	return best
}

// scanFrom is one lowest-cost scan from start, wrapping; with caps it
// skips full members (a separate loop, as leastFrom's).
func (p *leastTime) scanFrom(start int, tried *Tried, check, caps bool) int {
	if caps {
		best, bc, bw := p.scanBelowCap(start, len(p.backends), -1, 0, 1, tried, check)
		best, _, _ = p.scanBelowCap(0, start, best, bc, bw, tried, check)
		return best
	}
	best, bc, bw := p.scan(start, len(p.backends), -1, 0, 1, tried, check)
	best, _, _ = p.scan(0, start, best, bc, bw, tried, check)
	return best
}

// scan continues the lowest-cost scan over members [lo, hi): cost per
// weight compared by cross-multiplication in 128 bits (cost < 2^64,
// weight < 2^32).
func (p *leastTime) scan(lo, hi, best int, bc, bw uint64, tried *Tried, check bool) (int, uint64, uint64) {
	for i := lo; i < hi; i++ {
		b := p.backends[i]
		if check && tried.Has(b) {
			continue
		}
		c, w := p.cost(b), p.weights[i]
		if best < 0 || lessRatio(c, w, bc, bw) {
			best, bc, bw = i, c, w
		}
	}
	return best, bc, bw
}

// scanBelowCap is scan skipping members at their caps.
func (p *leastTime) scanBelowCap(lo, hi, best int, bc, bw uint64, tried *Tried, check bool) (int, uint64, uint64) {
	for i := lo; i < hi; i++ {
		b := p.backends[i]
		if check && tried.Has(b) || b.Full() {
			continue
		}
		c, w := p.cost(b), p.weights[i]
		if best < 0 || lessRatio(c, w, bc, bw) {
			best, bc, bw = i, c, w
		}
	}
	return best, bc, bw
}

// cost returns (live flows + 1) x (RTT + bias) in ns, saturated at 2^64-1 (a second
// of RTT times 18 billion flows: never in practice, but it must not wrap).
func (p *leastTime) cost(b *l4.Backend) uint64 {
	rtt := p.def
	if d, ok := b.RTT().Value(); ok {
		rtt = uint64(d) // > 0 whenever ok
	}
	hi, lo := bits.Mul64(min(flowsOf(b.LiveFlows()), loadCap)+1, rtt+p.bias)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}
