// Bounded loads and the preference walk shared by the hashing algorithms (source_hash, maglev).

package balance

import (
	"math/bits"

	"github.com/l4lb/l4lb/l4"
)

// hashWalkMax is how many entries of a key's preference sequence a pick
// inspects before it falls back to scanning the members. Enough for MaxTries
// retries past a few overloaded members; it keeps a pick O(1) when a tried
// set or the load bound rejects nearly everything.
const hashWalkMax = 4 * MaxTries

// hashed is what source_hash and maglev share: the members, which part of
// the flow is the key, and the load bound of "consistent hashing with
// bounded loads" (Mirrokni, Thorup, Zadimoghaddam, 2016), as HAProxy's
// hash-balance-factor applies it: a key whose member already carries more
// than factor x its fair share moves on to the next member of the key's own
// sequence, so affinity holds whenever it cannot overload one replica.
type hashed struct {
	pool
	key     l4.HashKey
	factor  uint64          // BalanceFactor in percent; 0 = unbounded
	sumW100 uint64          // 100 x sum of member weights
	vip     *l4.FlowCounter // the VIP's live flows; nil = sum the members
}

func newHashed(opts Options, members []Member) hashed {
	h := hashed{pool: newPool(members), key: opts.HashKey, factor: uint64(opts.BalanceFactor)}
	for _, w := range h.weights {
		h.sumW100 += 100 * w // <= 100 x 2^20 x 2^32 < 2^59
	}
	if len(members) > 0 {
		h.vip = members[0].Backend.VIPFlows()
	}
	return h
}

// walk returns a backend for the key whose preference sequence is seq read
// from start (wrapping), with a live flow acquired on it; nil when none can
// take the flow. A member that reached its cap between the choice and the
// acquire is seen full by the next choice, which moves on along the same
// sequence.
func (h *hashed) walk(seq []uint32, start int, key uint64, tried *Tried) *l4.Backend {
	if h.factor == 0 && tried.Len() == 0 {
		if b := h.takeUncapped(int(seq[start])); b != nil {
			return b // the common case, inline
		}
	}
	i := h.choose(seq, start, key, tried)
	if i >= 0 {
		if b := h.takeUncapped(i); b != nil {
			return b
		}
	}
	for range pickRaces {
		if i < 0 {
			return nil
		}
		if b := h.take(i); b != nil {
			return b
		}
		i = h.choose(seq, start, key, tried)
	}
	return nil
}

// choose returns the first member of the key's sequence that is untried,
// below its cap and within the bound. Retries of one flow, and flows whose
// member is full, read the same sequence, so they go where the key would go
// next. A run of entries of one member is checked once.
func (h *hashed) choose(seq []uint32, start int, key uint64, tried *Tried) int {
	if h.factor == 0 && tried.Len() == 0 {
		if i := int(seq[start]); !h.backends[i].Full() {
			return i
		}
	}
	total, last := int64(-1), -1
	for k := 0; k < min(len(seq), hashWalkMax); k++ {
		i := int(seq[wrap(start+k, len(seq))])
		if i != last && h.eligible(i, tried, &total) {
			return i
		}
		last = i
	}
	return h.fallback(key, tried, &total)
}

// fallback scans the members from a key-derived start: the first eligible
// one, else the first untried one below its cap (the bound may only be
// satisfiable by members the flow already tried; serving beats failing),
// else -1.
func (h *hashed) fallback(key uint64, tried *Tried, total *int64) int {
	n := len(h.backends)
	start := reduce(mix64(key^seedPick), n)
	for k := 0; k < n; k++ {
		if i := wrap(start+k, n); h.eligible(i, tried, total) {
			return i
		}
	}
	return h.firstUntried(start, tried)
}

// eligible reports whether member i is untried, below its cap and within
// the bound. The VIP total is read once per pick (*total < 0 means not yet).
func (h *hashed) eligible(i int, tried *Tried, total *int64) bool {
	if h.skip(i, tried, true) {
		return false
	}
	if h.factor == 0 {
		return true
	}
	if *total < 0 {
		*total = h.vipTotal()
	}
	return h.admits(i, *total)
}

// vipTotal returns the VIP's live flows: O(1) from the shared counter, or
// a sum over the members when the backends report to none.
func (h *hashed) vipTotal() int64 {
	if h.vip != nil {
		return h.vip.Load()
	}
	var t int64
	for _, b := range h.backends {
		t += b.LiveFlows()
	}
	return t
}

// admits reports whether member i may take one more flow when the VIP has
// total live flows. Its fair share of the total after this flow is
// (total+1) x w / W; it admits while its load is below factor% of that:
//
//	load x 100 x W < factor x w x (total+1)
//
// which for integer loads is HAProxy's load+1 <= ceil(factor% x share):
// after the pick no member exceeds the ceiling. Since the shares add up to
// (total+1) x factor% >= total+1, some member always admits. An idle member
// always admits, so no member is ever bounded to zero.
func (h *hashed) admits(i int, total int64) bool {
	load := flowsOf(h.backends[i].LiveFlows())
	if load == 0 {
		return true
	}
	lh, ll := bits.Mul64(load, h.sumW100)
	rh, rl := bits.Mul64(h.factor*h.weights[i], flowsOf(total)+1) // factor, w < 2^32
	return less128(lh, ll, rh, rl)
}
