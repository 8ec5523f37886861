// source_hash: a consistent hash ring with weighted virtual nodes and an O(1)-expected, O(log n) lookup.

package balance

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/l4lb/l4lb/l4"
)

// Ring size. Each member gets vnodes in proportion to its weight, the
// heaviest ringVnodes(n). A member's vnode count depends only on its own
// weight, the heaviest weight and a step function of n, so removing one of
// n equal members leaves every other vnode in place (only the removed
// member's keys move) unless n crosses a power of two above ringFullUpTo.
// Memory is at most max(ringBudget, 64 n) points of 12 bytes, plus the
// bucket index (<= 4 bytes a point): 2 MiB up to 2048 members.
const (
	ringMaxVnodes = 1024    // vnodes of the heaviest member (share error ~3%)
	ringMinVnodes = 64      // floor for huge member counts
	ringBudget    = 1 << 17 // points, before the floor applies
)

// ringVnodes returns the heaviest member's vnode count for n members: a
// power of two, so that it changes only when n crosses one.
func ringVnodes(n int) uint64 {
	v := uint64(ringBudget / n)
	if v >= ringMaxVnodes {
		return ringMaxVnodes
	}
	if v <= ringMinVnodes {
		return ringMinVnodes
	}
	return 1 << (63 - bits.LeadingZeros64(v)) // round down to a power of two
}

// ring is the source_hash picker. points are the sorted vnode positions,
// owner[p] the member at points[p]. A key goes to the first point at or
// after its hash (clockwise), wrapping at the top.
//
// Lookup is a binary search, narrowed first by a bucket index on the hash's
// top bits: start[b] is the first point in bucket b, so a key searches only
// its bucket (about one point) and stays well under 50 ns at any size.
type ring struct {
	hashed
	points []uint64
	owner  []uint32
	start  []uint32 // len 2^bucketBits + 1
	shift  uint     // 64 - bucketBits
}

func newRing(opts Options, members []Member) (*ring, error) {
	if _, err := idOrder(members); err != nil {
		return nil, fmt.Errorf("source_hash: %w", err)
	}
	r := &ring{hashed: newHashed(opts, members)}
	r.points, r.owner = ringPoints(members)
	r.buildIndex()
	return r, nil
}

// ringPoint is one vnode: its position and its member.
type ringPoint struct {
	pos uint64
	m   uint32
}

// ringPoints places every member's vnodes: the j-th vnode of member m sits
// at the j-th output of splitmix64 seeded with hash(m.ID), so it depends on
// nothing but the ID (not on slice order, not on the other members). Equal
// positions, vanishingly rare, are ordered by ID so that the ring is still
// the same everywhere.
func ringPoints(members []Member) ([]uint64, []uint32) {
	var maxW uint64
	for _, m := range members {
		maxW = max(maxW, uint64(m.Weight))
	}
	v := ringVnodes(len(members))
	counts := make([]uint64, len(members))
	var total uint64
	for i, m := range members {
		counts[i] = max(1, (v*uint64(m.Weight)+maxW-1)/maxW)
		total += counts[i]
	}
	pts := make([]ringPoint, 0, total)
	for i, m := range members {
		s := hashString(string(m.Backend.ID), seedRing)
		for range counts[i] {
			s += golden
			pts = append(pts, ringPoint{mix64(s), uint32(i)})
		}
	}
	radixSort(pts)
	orderTies(pts, members)
	pos, owner := make([]uint64, len(pts)), make([]uint32, len(pts))
	for i, p := range pts {
		pos[i], owner[i] = p.pos, p.m
	}
	return pos, owner
}

// radixSort sorts pts by position: LSD radix, 8 passes of 8 bits. Linear,
// so a 10^5-point ring builds in a few milliseconds where a comparison sort
// with a callback took tens.
func radixSort(pts []ringPoint) {
	buf := make([]ringPoint, len(pts))
	src, dst := pts, buf
	for shift := uint(0); shift < 64; shift += 8 {
		var count [257]int
		for _, p := range src {
			count[(p.pos>>shift)&0xff+1]++
		}
		for d := 1; d < len(count); d++ {
			count[d] += count[d-1]
		}
		for _, p := range src {
			d := (p.pos >> shift) & 0xff
			dst[count[d]] = p
			count[d]++
		}
		src, dst = dst, src
	}
	// Eight passes: the sorted data ends up back in pts.
}

// orderTies orders runs of equal positions by member ID.
func orderTies(pts []ringPoint, members []Member) {
	for i := 0; i < len(pts); {
		j := i + 1
		for j < len(pts) && pts[j].pos == pts[i].pos {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(pts[i:j], func(a, b ringPoint) int {
				return cmp.Compare(members[a.m].Backend.ID, members[b.m].Backend.ID)
			})
		}
		i = j
	}
}

// buildIndex fills start with 2^k buckets, 2^k <= points < 2^(k+1).
func (r *ring) buildIndex() {
	k := uint(bits.Len(uint(len(r.points))) - 1)
	r.shift = 64 - k
	r.start = make([]uint32, 1<<k+1)
	p := 0
	for b := range r.start {
		for p < len(r.points) && r.bucket(r.points[p]) < uint64(b) {
			p++
		}
		r.start[b] = uint32(p)
	}
}

// bucket returns h's bucket: its top bits (none when shift is 64, which Go
// defines as 0 for an unsigned shift).
func (r *ring) bucket(h uint64) uint64 { return h >> r.shift }

func (r *ring) Pick(f *l4.Flow, tried *Tried) *l4.Backend {
	key := flowHash(f, r.key)
	return r.walk(r.owner, r.lookup(key), key, tried)
}

// lookup returns the index of the first point at or after h, wrapping: a
// binary search within h's bucket (written out: the generic one costs a
// call on a path that is a few nanoseconds in all).
func (r *ring) lookup(h uint64) int {
	b := r.bucket(h)
	lo, hi := int(r.start[b]), int(r.start[b+1])
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if r.points[mid] < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(r.points) {
		return 0
	}
	return lo
}
