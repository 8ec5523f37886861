// Property tests of the source_hash ring: minimal remapping, lookup correctness, weighted vnodes.

package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

func mustRing(t *testing.T, opts Options, ms []Member) *ring {
	t.Helper()
	opts.Algorithm = l4.SourceHash
	r, err := newRing(opts, ms)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ringOwners maps each flow to its first-choice backend ID.
func ringOwners(r *ring, fs []l4.Flow) []l4.BackendID {
	out := make([]l4.BackendID, len(fs))
	for i := range fs {
		out[i] = r.backends[r.owner[r.lookup(flowHash(&fs[i], r.key))]].ID
	}
	return out
}

// Removing one of n equal backends remaps exactly the keys it owned (keys
// on other backends never move), and those are at most 1.2/n of the keys
// (its arc share: 1024 vnodes a backend give about 3% relative spread).
// Adding one moves only keys onto the new backend, at most 1.2/(n+1).
func TestRingRemap(t *testing.T) {
	fs := flows(50000, 11)
	for _, n := range []int{3, 10, 100} {
		ms := makeMembers(equal(n+1, 100)...)
		base := ms[:n]
		before := ringOwners(mustRing(t, Options{}, base), fs)
		for _, r := range []int{0, n / 2, n - 1} {
			t.Run(fmt.Sprintf("remove %d of %d", r, n), func(t *testing.T) {
				after := ringOwners(mustRing(t, Options{}, without(base, r)), fs)
				checkRemap(t, before, after, base[r].Backend.ID, n, true)
			})
		}
		t.Run(fmt.Sprintf("add 1 to %d", n), func(t *testing.T) {
			after := ringOwners(mustRing(t, Options{}, ms), fs)
			checkRemap(t, before, after, ms[n].Backend.ID, n+1, false)
		})
	}
}

func checkRemap(t *testing.T, before, after []l4.BackendID, id l4.BackendID, n int, removed bool) {
	t.Helper()
	moved := 0
	for i := range before {
		if before[i] == after[i] {
			continue
		}
		moved++
		if removed && before[i] != id || !removed && after[i] != id {
			t.Fatalf("key %d moved %s -> %s, unrelated to %s", i, before[i], after[i], id)
		}
	}
	if frac, bound := float64(moved)/float64(len(before)), 1.2/float64(n); frac > bound {
		t.Errorf("remapped %.4f of keys, bound %.4f", frac, bound)
	}
}

// lookup agrees with a plain search for the first point >= h, wrapping,
// including at the edges and at the points themselves.
func TestRingLookup(t *testing.T) {
	for _, n := range []int{1, 2, 3, 50, 1000} {
		r := mustRing(t, Options{}, makeMembers(equal(n, 7)...))
		hs := []uint64{0, 1, math.MaxUint64, r.points[0], r.points[len(r.points)-1], r.points[len(r.points)-1] + 1}
		rng := rand.New(rand.NewPCG(uint64(n), 3))
		for range 2000 {
			p := r.points[rng.IntN(len(r.points))]
			hs = append(hs, rng.Uint64(), p, p-1, p+1)
		}
		for _, h := range hs {
			// Reference: a plain binary search over all points, no buckets.
			want := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= h })
			if want == len(r.points) {
				want = 0
			}
			if got := r.lookup(h); got != want {
				t.Fatalf("n=%d lookup(%#x) = %d, want %d", n, h, got, want)
			}
		}
	}
}

// Vnodes follow weights (the heaviest gets ringVnodes(n)), and the ring
// depends on IDs and weights only, not on member order.
func TestRingPoints(t *testing.T) {
	ms := makeMembers(100, 50, 1, 100)
	r := mustRing(t, Options{}, ms)
	count := make([]int, len(ms))
	for _, o := range r.owner {
		count[o]++
	}
	if want := []int{1024, 512, 11, 1024}; !slices.Equal(count, want) {
		t.Errorf("vnodes %v, want %v", count, want)
	}
	if !slices.IsSorted(r.points) {
		t.Error("points not sorted")
	}
	fs := flows(2000, 5)
	want := ringOwners(r, fs)
	shuffled := slices.Clone(ms)
	rand.New(rand.NewPCG(9, 9)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if got := ringOwners(mustRing(t, Options{}, shuffled), fs); !slices.Equal(got, want) {
		t.Error("ring depends on member order")
	}
}

func TestRingVnodes(t *testing.T) {
	tests := []struct {
		n    int
		want uint64
	}{{1, 1024}, {128, 1024}, {129, 512}, {256, 512}, {1000, 128}, {2048, 64}, {100000, 64}}
	for _, tt := range tests {
		if got := ringVnodes(tt.n); got != tt.want {
			t.Errorf("ringVnodes(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}
