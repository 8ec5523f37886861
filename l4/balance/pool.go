// The member arrays every picker scans, and the scans pickers share.

package balance

import "github.com/l4lb/l4lb/l4"

// loadCap caps live-flow counts in comparisons (4 billion flows a backend
// is beyond any real load) so that a count times a uint32 weight fits in
// uint64.
const loadCap = 1<<32 - 1

// pool is a picker's private copy of its members, split into parallel
// arrays so that a scan touches only what it compares. Immutable once built.
type pool struct {
	backends []*l4.Backend
	weights  []uint64
}

func newPool(members []Member) pool {
	p := pool{
		backends: make([]*l4.Backend, len(members)),
		weights:  make([]uint64, len(members)),
	}
	for i, m := range members {
		p.backends[i] = m.Backend
		p.weights[i] = uint64(m.Weight)
	}
	return p
}

// pickRaces bounds how often one pick chooses again after losing the last
// slot of a capped backend to a concurrent pick (TryAcquire failed): each
// new choice sees the backend full and moves on, so more than a couple is
// a storm of releases and re-fills that a nil answer (wait) serves better.
const pickRaces = MaxTries

// take counts a new flow on member i and returns its backend, or nil when
// the member reached its cap since it was chosen (the caller chooses again).
func (p *pool) take(i int) *l4.Backend {
	b := p.backends[i]
	if !b.TryAcquire() {
		return nil
	}
	return b
}

// takeUncapped is take for a member without a cap or rate, nil for one
// with either: the pickers' first try, small enough to inline, so that a VIP
// without caps picks as it did before caps existed (one more load).
func (p *pool) takeUncapped(i int) *l4.Backend {
	b := p.backends[i]
	if b.Limited() {
		return nil
	}
	b.Acquire()
	return b
}

// skip reports whether member i cannot take this flow: tried already
// (checked only when check is set) or at its cap. A full backend is
// treated as a tried one, so every algorithm moves on exactly as on a
// retry.
func (p *pool) skip(i int, tried *Tried, check bool) bool {
	b := p.backends[i]
	return check && tried.Has(b) || b.Full()
}

// firstUntried returns the first member at or after start (wrapping) that
// tried does not hold and that is below its cap, or -1. It is the retry
// path's last resort.
func (p *pool) firstUntried(start int, tried *Tried) int {
	n := len(p.backends)
	check := tried.Len() > 0
	for k := 0; k < n; k++ {
		if i := wrap(start+k, n); !p.skip(i, tried, check) {
			return i
		}
	}
	return -1
}

// leastLoaded returns the untried member below its cap with the fewest live
// flows per weight, or -1. The scan starts at start and only a strictly
// lower ratio replaces the best, so a caller that varies start spreads ties
// instead of always handing them to member 0. Caps are checked on the
// winner only, and the scan repeated skipping full members if it is full:
// a full member is rarely the least loaded, and an uncapped VIP pays one
// load a pick instead of one a member.
func (p *pool) leastLoaded(start int, tried *Tried) int {
	check := tried.Len() > 0
	best := p.leastFrom(start, tried, check, false)
	if best >= 0 && p.backends[best].Full() {
		best = p.leastFrom(start, tried, check, true)
	}
	return best
}

// leastFrom is one least-loaded scan from start, wrapping; with caps it
// skips full members (a separate loop: the common scan stays as tight as
// it was before caps existed).
func (p *pool) leastFrom(start int, tried *Tried, check, caps bool) int {
	if caps {
		best, bl, bw := p.scanLeastBelowCap(start, len(p.backends), -1, 0, 1, tried, check)
		best, _, _ = p.scanLeastBelowCap(0, start, best, bl, bw, tried, check)
		return best
	}
	best, bl, bw := p.scanLeast(start, len(p.backends), -1, 0, 1, tried, check)
	best, _, _ = p.scanLeast(0, start, best, bl, bw, tried, check)
	return best
}

// scanLeast continues a least-loaded scan over members [lo, hi). Counts
// are capped at loadCap so that count x weight fits in 64 bits: one
// multiply per side, no division.
func (p *pool) scanLeast(lo, hi, best int, bl, bw uint64, tried *Tried, check bool) (int, uint64, uint64) {
	for i := lo; i < hi; i++ {
		b := p.backends[i]
		if check && tried.Has(b) {
			continue
		}
		l, w := min(flowsOf(b.LiveFlows()), loadCap), p.weights[i]
		if best < 0 || l*bw < bl*w {
			best, bl, bw = i, l, w
		}
	}
	return best, bl, bw
}

// scanLeastBelowCap is scanLeast skipping members at their caps.
func (p *pool) scanLeastBelowCap(lo, hi, best int, bl, bw uint64, tried *Tried, check bool) (int, uint64, uint64) {
	for i := lo; i < hi; i++ {
		b := p.backends[i]
		if check && tried.Has(b) || b.Full() {
			continue
		}
		l, w := min(flowsOf(b.LiveFlows()), loadCap), p.weights[i]
		if best < 0 || l*bw < bl*w {
			best, bl, bw = i, l, w
		}
	}
	return best, bl, bw
}

// wrap returns i mod n for i in [0, 2n) without a division.
func wrap(i, n int) int {
	if i >= n {
		i -= n
	}
	return i
}

// none is the picker of an empty member list.
type none struct{}

func (none) Pick(*l4.Flow, *Tried) *l4.Backend { return nil }
