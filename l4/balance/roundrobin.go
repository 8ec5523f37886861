// round_robin: nginx's smooth weighted round robin, precomputed and walked by one atomic cursor.

package balance

import (
	"math/rand/v2"
	"sync/atomic"

	"github.com/l4lb/l4lb/l4"
)

// nginx's smooth weighted round robin is periodic: after sum(weights) picks
// every backend's running score is back to zero. So one period, computed at
// build time, is the whole algorithm, and a pick is one atomic increment and
// one table read instead of a locked O(n) update.
//
// Memory is bounded: weights are divided by their gcd and, if the period is
// still longer than rrMaxSeq = 64 Ki entries (256 KiB; or n when there are
// more members), scaled down to fit, each kept >= 1. A scaled member's
// share is then off by at most about one entry per period (2^-16 of the
// traffic). nginx's rule costs O(n) a step; when period x n exceeds
// rrMaxWork (past ~256 members with unequal weights) the period is built
// instead by stride scheduling in O(log n) a step: entry j of member i is
// due at (j + 1/2) / w_i, earliest first. Same shares, and just as smooth
// (every prefix within 1.5 entries of each member's share), so the
// build stays in milliseconds at any size.
//
// A retry (a flow skipping tried members) takes the next entries of the
// shared sequence, as a new flow would, so the untried members keep their
// relative shares.
const (
	rrMaxSeq  = 1 << 16
	rrMaxWork = 1 << 24
	rrMaxWalk = 4 * MaxTries // cursor steps a retry takes before scanning
)

type roundRobin struct {
	pool
	seq []uint32 // one period of the sequence, as member indices

	// next is the one word every pick writes; the padding keeps it off the
	// cache line of the read-only fields that every core reads.
	_    [64]byte
	next atomic.Uint64
}

func newRoundRobin(members []Member) *roundRobin {
	r := &roundRobin{pool: newPool(members)}
	r.seq = rrSequence(r.weights)
	// Every health change builds a new picker; starting each one at the
	// same place would favour the head of the sequence when swaps are
	// frequent. Build time, not pick time, so this costs nothing per flow.
	r.next.Store(rand.Uint64())
	return r
}

func (r *roundRobin) Pick(_ *l4.Flow, tried *Tried) *l4.Backend {
	i := int(r.seq[r.next.Add(1)%uint64(len(r.seq))])
	if tried.Len() == 0 {
		if b := r.takeUncapped(i); b != nil {
			return b // the common case, inline
		}
	}
	i = r.choose(tried, i)
	for range pickRaces {
		if i < 0 {
			return nil
		}
		if b := r.take(i); b != nil {
			return b
		}
		i = r.choose(tried, -1)
	}
	return nil
}

// choose returns first when it is untried and below its cap, else the
// next such member of the sequence, or -1.
func (r *roundRobin) choose(tried *Tried, first int) int {
	check := tried.Len() > 0
	if first >= 0 && !r.skip(first, tried, check) {
		return first
	}
	for k := 0; k < rrMaxWalk; k++ {
		i := int(r.seq[r.next.Add(1)%uint64(len(r.seq))])
		if !r.skip(i, tried, check) {
			return i
		}
	}
	// Only a retry (or members at their caps) gets here, after a long run
	// of skipped members: scan, so that no pick costs O(period).
	return r.firstUntried(rand.IntN(len(r.backends)), tried)
}

// rrSequence returns one period of the smooth weighted sequence for ws.
func rrSequence(ws []uint64) []uint32 {
	ws = rrWeights(ws)
	var period uint64
	for _, w := range ws {
		period += w
	}
	if period*uint64(len(ws)) <= rrMaxWork {
		return swrrSequence(ws)
	}
	return strideSequence(ws, period)
}

// rrWeights reduces ws so that one period has at most max(rrMaxSeq, n)
// entries.
func rrWeights(ws []uint64) []uint64 {
	out := reduceGCD(ws)
	var sum uint64
	for _, w := range out {
		sum += w
	}
	limit := uint64(max(rrMaxSeq, len(ws)))
	if sum <= limit {
		return out
	}
	for i, w := range out {
		out[i] = max(1, (w*limit+sum/2)/sum) // w <= 2^32, limit <= 2^20: no overflow
	}
	return reduceGCD(out)
}

// reduceGCD returns ws divided by their greatest common divisor.
func reduceGCD(ws []uint64) []uint64 {
	var g uint64
	for _, w := range ws {
		g = gcd(g, w)
	}
	out := make([]uint64, len(ws))
	for i, w := range ws {
		out[i] = w / g
	}
	return out
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// swrrSequence runs nginx's smooth weighted round robin for one period:
// every step adds each weight to its member's score, picks the highest
// score (the lowest index on a tie) and takes the total off the winner.
func swrrSequence(ws []uint64) []uint32 {
	var total int64
	for _, w := range ws {
		total += int64(w)
	}
	cur := make([]int64, len(ws))
	seq := make([]uint32, total)
	for s := range seq {
		best := 0
		for i, w := range ws {
			cur[i] += int64(w)
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		seq[s] = uint32(best)
	}
	return seq
}

// strideSequence orders every member's entries by due time: entry j of
// member i is due at (2j+1) / (2 w_i), compared by cross-multiplication,
// ties to the lower index. A heap holds each member's next entry.
func strideSequence(ws []uint64, period uint64) []uint32 {
	h := make(strideHeap, len(ws))
	for i, w := range ws {
		h[i] = strideEntry{num: 1, w: w, i: uint32(i)}
	}
	for k := len(h)/2 - 1; k >= 0; k-- {
		h.down(k)
	}
	seq := make([]uint32, period)
	for s := range seq {
		seq[s] = h[0].i
		h[0].num += 2
		h.down(0)
	}
	return seq
}

// strideEntry is a member's next entry, due at num / (2 w).
type strideEntry struct {
	num, w uint64 // num <= 2 x 2^20, w <= 2^20 after rrWeights: no overflow
	i      uint32
}

type strideHeap []strideEntry

func (h strideHeap) less(a, b int) bool {
	x, y := h[a].num*h[b].w, h[b].num*h[a].w
	return x < y || x == y && h[a].i < h[b].i
}

// down restores the heap below k.
func (h strideHeap) down(k int) {
	for {
		c := 2*k + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h.less(c+1, c) {
			c++
		}
		if !h.less(c, k) {
			return
		}
		h[k], h[c] = h[c], h[k]
		k = c
	}
}
