// random: weighted uniform choice through Vose's alias table, O(1) a pick.

package balance

import (
	"math/bits"
	"math/rand/v2"

	"github.com/l4lb/l4lb/l4"
)

// randomTries is how many draws a retry makes before scanning for any
// untried member.
const randomTries = 4

type random struct {
	pool
	alias aliasTable
}

func newRandom(members []Member) *random {
	r := &random{pool: newPool(members)}
	r.alias = newAliasTable(r.weights)
	return r
}

func (r *random) Pick(_ *l4.Flow, tried *Tried) *l4.Backend {
	if tried.Len() == 0 {
		if b := r.takeUncapped(r.alias.sample(uint32(rand.Uint64()))); b != nil {
			return b // the common case, inline
		}
	}
	for range pickRaces {
		i := r.choose(tried)
		if i < 0 {
			return nil
		}
		if b := r.take(i); b != nil {
			return b
		}
	}
	return nil
}

// choose draws a member that is untried and below its cap, or scans for
// one after randomTries draws, or returns -1.
func (r *random) choose(tried *Tried) int {
	check := tried.Len() > 0
	for k := 0; k < randomTries; k++ {
		if i := r.alias.sample(uint32(rand.Uint64())); !r.skip(i, tried, check) {
			return i
		}
	}
	return r.firstUntried(rand.IntN(len(r.backends)), tried)
}

// aliasTable draws index i with probability weights[i]/sum in O(1)
// (Vose's alias method, built in integers so that it is exact and the same
// everywhere). Column c keeps c when the draw's fraction is below prob[c]
// (in units of 2^-32) and gives alias[c] otherwise. 32-bit draws let p2c
// take both its candidates from one random word; shares are then exact to
// about n x 2^-32.
type aliasTable struct {
	prob  []uint32
	alias []uint32
}

func newAliasTable(weights []uint64) aliasTable {
	n := uint64(len(weights))
	var sum uint64
	for _, w := range weights {
		sum += w
	}
	t := aliasTable{prob: make([]uint32, n), alias: make([]uint32, n)}
	// Column i holds weights[i]*n of mass out of a column height of sum.
	mass := make([]uint64, n)
	var small, large []uint32
	for i, w := range weights {
		mass[i] = w * n // w <= 2^32, n <= 2^20
		if mass[i] < sum {
			small = append(small, uint32(i))
		} else {
			large = append(large, uint32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		q, _ := bits.Div64(mass[s], 0, sum) // mass[s] < sum: no overflow
		t.prob[s], t.alias[s] = uint32(q>>32), l
		mass[l] -= sum - mass[s]
		if mass[l] < sum {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// What is left is full (or off by rounding): always keep it.
	for _, c := range append(small, large...) {
		t.prob[c], t.alias[c] = ^uint32(0), c
	}
	return t
}

// sample maps one uniform 32-bit draw to an index: the high half of r*n is
// the column, the low half the fraction that decides column or alias.
func (t *aliasTable) sample(r uint32) int {
	x := uint64(r) * uint64(len(t.prob))
	c, frac := x>>32, uint32(x)
	if frac < t.prob[c] {
		return int(c)
	}
	return int(t.alias[c])
}
