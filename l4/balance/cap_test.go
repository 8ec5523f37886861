// Per-backend caps (max_conns, max_sessions): every algorithm skips a full backend, never overshoots.

package balance

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// TestPickSkipsFull: with caps 5/5/10 every algorithm fills the backends
// exactly to their caps, then returns nil (all full) without acquiring;
// after one release, the next pick lands on the backend that freed a slot.
// Bounded and unbounded hashing, first picks and picks with a tried set.
func TestPickSkipsFull(t *testing.T) {
	caps := []int64{5, 5, 10}
	fs := flows(256, 7)
	eachBounded(t, allAlgorithms, func(t *testing.T, opts Options) {
		ms := makeMembers(100, 100, 100)
		setCaps(ms, caps...)
		p := mustNew(t, opts, ms)
		for k := range 20 {
			if b := p.Pick(&fs[k%len(fs)], nil); b == nil {
				t.Fatalf("pick %d: nil with free slots (flows %v)", k, live(ms))
			}
		}
		for i, c := range caps {
			if got := ms[i].Backend.LiveFlows(); got != c {
				t.Fatalf("backend %d: %d live flows, cap %d (all %v)", i, got, c, live(ms))
			}
		}
		for k := range 50 { // every key, including those whose own member is full
			if b := p.Pick(&fs[k], nil); b != nil {
				t.Fatalf("pick at full caps: got %s (flows %v)", b.ID, live(ms))
			}
		}
		var tried Tried
		tried.Add(ms[0].Backend)
		if b := p.Pick(&fs[0], &tried); b != nil {
			t.Fatalf("retry at full caps: got %s", b.ID)
		}
		ms[1].Backend.Release()
		for k := range 50 {
			b := p.Pick(&fs[k], nil)
			if b != ms[1].Backend {
				t.Fatalf("after a release on b001: pick %d got %v, want b001", k, b)
			}
			b.Release()
		}
		if b := p.Pick(&fs[3], &tried); b != ms[1].Backend {
			t.Fatalf("retry after a release on b001: got %v", b)
		}
	})
}

// TestPickCapRace: many goroutines pick and release at once against small
// caps; no backend's count ever exceeds its cap (TryAcquire's CAS), and
// picks keep succeeding while slots are free.
func TestPickCapRace(t *testing.T) {
	fs := flows(64, 3)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			ms := makeMembers(100, 100, 100)
			caps := []int64{2, 3, 5}
			setCaps(ms, caps...)
			p := mustNew(t, Options{Algorithm: alg}, ms)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var over []string
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range 2000 {
						b := p.Pick(&fs[(g*31+k)%len(fs)], nil)
						if b == nil {
							continue
						}
						for i, m := range ms {
							if n := m.Backend.LiveFlows(); n > caps[i] {
								mu.Lock()
								over = append(over, fmt.Sprintf("%s=%d", m.Backend.ID, n))
								mu.Unlock()
							}
						}
						b.Release()
					}
				}()
			}
			wg.Wait()
			if len(over) > 0 {
				t.Fatalf("counts above caps %v: %v", caps, over[:min(len(over), 10)])
			}
			if got := live(ms); got[0]+got[1]+got[2] != 0 {
				t.Fatalf("live flows left: %v", got)
			}
		})
	}
}

func live(ms []Member) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Backend.LiveFlows()
	}
	return out
}

// TestExplainFull: explain says what Pick does with a full member: the
// hashing algorithms name the next member of the key's sequence (and list
// the full one as passed by), least_conn leaves the full one out even
// when it is the least loaded.
func TestExplainFull(t *testing.T) {
	fs := flows(64, 11)
	eachBounded(t, []l4.Algorithm{l4.Maglev, l4.SourceHash}, func(t *testing.T, opts Options) {
		ms := makeMembers(100, 100, 100, 100)
		p := mustNew(t, opts, ms)
		x := p.(Explainer)
		for k := range fs {
			owner := x.Explain(&fs[k]).Chosen
			ms[owner].Backend.SetMaxFlows(1)
			ms[owner].Backend.Acquire() // full
			e := x.Explain(&fs[k])
			b := p.Pick(&fs[k], nil)
			if e.Chosen < 0 || ms[e.Chosen].Backend != b || !e.Members[owner].Full || len(e.Hash.Skipped) == 0 || e.Hash.Skipped[0] != owner {
				t.Fatalf("flow %d: explain chose %d (skipped %v, full %v), pick %v; owner %d is full", k, e.Chosen, e.Hash.Skipped, e.Members[owner].Full, b.ID, owner)
			}
			b.Release()
			ms[owner].Backend.Release()
			ms[owner].Backend.SetMaxFlows(0)
		}
	})
	t.Run("least_conn", func(t *testing.T) {
		ms := makeMembers(100, 100)
		ms[1].Backend.Acquire()
		ms[1].Backend.Acquire()
		ms[0].Backend.SetMaxFlows(1)
		ms[0].Backend.Acquire() // least loaded, and full
		p := mustNew(t, Options{Algorithm: l4.LeastConn}, ms)
		if e := p.(Explainer).Explain(nil); e.Chosen != 1 || !e.Members[0].Full {
			t.Fatalf("explain chose %d (full %v), want 1", e.Chosen, e.Members[0].Full)
		}
		releaseAll(ms)
	})
}

// TestPickCapFill: 8 goroutines fill capped backends at once, holding
// every flow: exactly the caps' sum of picks succeed, each backend ends
// exactly at its cap, and the rest are nil.
func TestPickCapFill(t *testing.T) {
	fs := flows(64, 5)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			ms := makeMembers(100, 100, 100)
			caps := []int64{2, 3, 5}
			setCaps(ms, caps...)
			p := mustNew(t, Options{Algorithm: alg}, ms)
			var won atomic.Int64
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range 10 {
						if p.Pick(&fs[(g*10+k)%len(fs)], nil) != nil {
							won.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := live(ms); won.Load() != 10 || got[0] != 2 || got[1] != 3 || got[2] != 5 {
				t.Fatalf("%d picks won, live %v; want 10, %v", won.Load(), got, caps)
			}
			releaseAll(ms)
		})
	}
}

// TestPickOneFreeAmongMany: 32 members, all but one at their caps: every
// pick of every algorithm finds the free one (a full candidate is moved
// past, not merely retried at random until the race loop gives up).
func TestPickOneFreeAmongMany(t *testing.T) {
	fs := flows(256, 9)
	eachBounded(t, allAlgorithms, func(t *testing.T, opts Options) {
		ms := makeMembers(equal(32, 100)...)
		for _, m := range ms {
			m.Backend.SetMaxFlows(1)
			m.Backend.Acquire()
		}
		free := ms[17].Backend
		free.Release()
		p := mustNew(t, opts, ms)
		for k := range fs {
			b := p.Pick(&fs[k], nil)
			if b != free {
				t.Fatalf("pick %d: %v, want the one free member %s", k, b, free.ID)
			}
			b.Release()
		}
		releaseAll(ms)
	})
}
