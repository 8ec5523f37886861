// Zero allocations per Pick for every algorithm, first pick and retry, bounded or not.

package balance

import (
	"fmt"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

func TestPickAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters distort allocation counts")
	}
	fs := flows(64, 1)
	for _, n := range []int{3, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			eachBounded(t, allAlgorithms, func(t *testing.T, opts Options) {
				ms := makeMembers(equal(n, 100)...)
				assertNoPickAllocs(t, mustNew(t, opts, ms), ms[0].Backend, fs)
			})
		})
	}
}

// TestPickAllocsCapped: the same with caps set and one member full, so that
// every pick checks caps and some skip a full member.
func TestPickAllocsCapped(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters distort allocation counts")
	}
	fs := flows(64, 1)
	eachBounded(t, allAlgorithms, func(t *testing.T, opts Options) {
		ms := makeMembers(equal(3, 100)...)
		setCaps(ms, 1000, 1, 1000)
		ms[1].Backend.Acquire() // full
		assertNoPickAllocs(t, mustNew(t, opts, ms), ms[0].Backend, fs)
	})
}

// assertNoPickAllocs fails t if a first pick or a retry with tried
// allocates.
func assertNoPickAllocs(t *testing.T, p Picker, tried *l4.Backend, fs []l4.Flow) {
	t.Helper()
	var set Tried
	set.Add(tried)
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		i++
		p.Pick(&fs[i%len(fs)], nil).Release()
		p.Pick(&fs[i%len(fs)], &set).Release()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per pick", allocs/2)
	}
}
