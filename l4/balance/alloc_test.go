// Zero allocations per Pick for every algorithm, first pick and retry, bounded or not.

package balance

import (
	"fmt"
	"testing"
)

func TestPickAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters distort allocation counts")
	}
	fs := flows(64, 1)
	for _, alg := range allAlgorithms {
		for _, n := range []int{3, 1000} {
			for _, factor := range []uint32{0, 125} {
				t.Run(fmt.Sprintf("%s/%d/factor=%d", alg, n, factor), func(t *testing.T) {
					ms := makeMembers(equal(n, 100)...)
					p := mustNew(t, Options{Algorithm: alg, BalanceFactor: factor}, ms)
					var tried Tried
					tried.Add(ms[0].Backend)
					i := 0
					allocs := testing.AllocsPerRun(200, func() {
						i++
						p.Pick(&fs[i%len(fs)], nil).Release()
						p.Pick(&fs[i%len(fs)], &tried).Release()
					})
					if allocs != 0 {
						t.Errorf("%v allocations per pick", allocs/2)
					}
				})
			}
		}
	}
}

// TestPickAllocsCapped: the same with caps set and one member full, so that
// every pick checks caps and some skip a full member.
func TestPickAllocsCapped(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters distort allocation counts")
	}
	fs := flows(64, 1)
	for _, alg := range allAlgorithms {
		for _, factor := range []uint32{0, 125} {
			t.Run(fmt.Sprintf("%s/factor=%d", alg, factor), func(t *testing.T) {
				ms := makeMembers(equal(3, 100)...)
				for _, m := range ms {
					m.Backend.SetMaxFlows(1000)
				}
				ms[1].Backend.SetMaxFlows(1)
				ms[1].Backend.Acquire() // full
				p := mustNew(t, Options{Algorithm: alg, BalanceFactor: factor}, ms)
				var tried Tried
				tried.Add(ms[0].Backend)
				i := 0
				allocs := testing.AllocsPerRun(200, func() {
					i++
					p.Pick(&fs[i%len(fs)], nil).Release()
					p.Pick(&fs[i%len(fs)], &tried).Release()
				})
				if allocs != 0 {
					t.Errorf("%v allocations per pick", allocs/2)
				}
			})
		}
	}
}
