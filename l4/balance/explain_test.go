// Explain: it names what Pick then returns wherever Pick is deterministic,
// and it changes nothing (no flow acquired, no rotation advanced).

package balance

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Every picker New returns explains itself.
var (
	_ Explainer = (*roundRobin)(nil)
	_ Explainer = (*leastConn)(nil)
	_ Explainer = (*p2c)(nil)
	_ Explainer = (*leastTime)(nil)
	_ Explainer = (*ring)(nil)
	_ Explainer = (*maglev)(nil)
	_ Explainer = (*random)(nil)
	_ Explainer = none{}
)

func explain(t *testing.T, p Picker, f *l4.Flow) Explanation {
	t.Helper()
	x, ok := p.(Explainer)
	if !ok {
		t.Fatalf("%T does not explain", p)
	}
	return x.Explain(f)
}

// pickIndex picks for f, releases the flow and returns the member's index.
func pickIndex(p Picker, f *l4.Flow, idx map[*l4.Backend]int) int {
	b := p.Pick(f, nil)
	b.Release()
	return idx[b]
}

func liveCounts(ms []Member) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Backend.LiveFlows()
	}
	return out
}

func TestExplainChangesNothing(t *testing.T) {
	fs := flows(32, 7)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			ms := makeMembers(100, 200, 100)
			p := mustNew(t, Options{Algorithm: alg, BalanceFactor: 125}, ms)
			for i := range 9 {
				p.Pick(&fs[i], nil) // held: loads to read
			}
			before := liveCounts(ms)
			var rrNext uint64
			if rr, ok := p.(*roundRobin); ok {
				rrNext = rr.next.Load()
			}
			for i := range fs {
				e := explain(t, p, &fs[i])
				if e.Algorithm != alg || e.Rule == "" || len(e.Members) != 3 {
					t.Fatalf("%+v", e)
				}
			}
			if after := liveCounts(ms); !slices.Equal(before, after) {
				t.Fatalf("live flows %v before explaining, %v after", before, after)
			}
			if rr, ok := p.(*roundRobin); ok && rr.next.Load() != rrNext {
				t.Fatal("explaining advanced the rotation")
			}
			releaseAll(ms)
		})
	}
}

// TestExplainHashingMatchesPick: maglev and source_hash, unbounded and
// with the load bound over loaded members, every key: Explain's choice is
// Pick's.
func TestExplainHashingMatchesPick(t *testing.T) {
	fs := flows(2000, 11)
	for _, alg := range []l4.Algorithm{l4.Maglev, l4.SourceHash} {
		for _, key := range []l4.HashKey{l4.HashSrcIP, l4.HashSrcIPPort, l4.HashFiveTuple} {
			for _, factor := range []uint32{0, 110} {
				t.Run(fmt.Sprintf("%s/%s/%d", alg, key, factor), func(t *testing.T) {
					ms := makeMembers(100, 100, 300, 100, 50)
					idx := index(ms)
					p := mustNew(t, Options{Algorithm: alg, HashKey: key, MaglevSize: 1009, BalanceFactor: factor}, ms)
					skipped := 0
					for i := range fs {
						e := explain(t, p, &fs[i])
						if got := pickIndex(p, &fs[i], idx); e.Chosen != got {
							t.Fatalf("flow %v: explained %d, picked %d (%+v)", fs[i], e.Chosen, got, e.Hash)
						}
						h := e.Hash
						if h == nil || h.Hash != FlowHash(&fs[i], key) || h.Key != key || h.BalanceFactor != factor {
							t.Fatalf("hash path %+v", h)
						}
						if factor == 0 && e.Chosen != h.Owner {
							t.Fatalf("unbounded: chose %d, owner %d", e.Chosen, h.Owner)
						}
						skipped += len(h.Skipped)
						if i%3 == 0 { // load some members, so that the bound bites
							p.Pick(&fs[i], nil)
						}
					}
					if factor > 0 && skipped == 0 {
						t.Fatal("the bound never passed a member by: the test exercises nothing")
					}
					releaseAll(ms)
				})
			}
		}
	}
}

func TestExplainMaglevSlot(t *testing.T) {
	ms := makeMembers(equal(4, 100)...)
	p := mustNew(t, Options{Algorithm: l4.Maglev, HashKey: l4.HashFiveTuple, MaglevSize: 1009}, ms).(*maglev)
	for _, f := range flows(200, 3) {
		e := p.Explain(&f)
		h := e.Hash
		if h.TableSize != 1009 || h.Slot != Slot(FlowHash(&f, l4.HashFiveTuple), 1009) || h.Owner != int(p.table[h.Slot]) {
			t.Fatalf("%v: %+v", f, h)
		}
	}
}

func TestExplainRingPoint(t *testing.T) {
	ms := makeMembers(100, 300)
	p := mustNew(t, Options{Algorithm: l4.SourceHash}, ms).(*ring)
	for _, f := range flows(200, 4) {
		e := p.Explain(&f)
		h := e.Hash
		if h.Points != len(p.points) || h.Position != p.points[h.Point] || h.Position < h.Hash && h.Point != 0 {
			t.Fatalf("%v: %+v", f, h)
		}
		if want := []int{342, 1024}[h.Owner]; h.Vnodes != want {
			t.Fatalf("owner %d has %d vnodes, want %d", h.Owner, h.Vnodes, want)
		}
	}
}

func TestExplainLeastConn(t *testing.T) {
	ms := makeMembers(100, 100, 200)
	idx := index(ms)
	p := mustNew(t, Options{Algorithm: l4.LeastConn}, ms)
	f := flows(1, 1)[0]
	// Idle: a three-way tie.
	if e := explain(t, p, &f); e.Chosen != -1 || !slices.Equal(e.Tied, []int{0, 1, 2}) {
		t.Fatalf("idle: chosen %d tied %v", e.Chosen, e.Tied)
	}
	// 2 flows on b0, 3 on b1, 3 on b2 (weight 200: 1.5 per 100): b2 wins.
	for i, n := range []int{2, 3, 3} {
		for range n {
			ms[i].Backend.Acquire()
		}
	}
	e := explain(t, p, &f)
	if e.Chosen != 2 || e.Tied != nil || e.Members[2].Load != 3.0/200 {
		t.Fatalf("chosen %d tied %v members %+v", e.Chosen, e.Tied, e.Members)
	}
	for range 20 {
		if got := pickIndex(p, &f, idx); got != 2 {
			t.Fatalf("explained b2, picked %d", got)
		}
	}
	releaseAll(ms)
}

func TestExplainLeastTime(t *testing.T) {
	ms := makeMembers(100, 100, 100)
	idx := index(ms)
	p := mustNew(t, Options{Algorithm: l4.LeastTime, LeastTimeBias: time.Millisecond, LeastTimeDefault: 5 * time.Millisecond}, ms)
	ms[0].Backend.ObserveRTT(3 * time.Millisecond)
	ms[1].Backend.ObserveRTT(time.Millisecond) // no sample for b2: the 5ms default
	f := flows(1, 1)[0]
	e := explain(t, p, &f)
	if e.Chosen != 1 || e.Members[2].RTTSampled || e.Members[2].RTT != 5*time.Millisecond || e.Members[1].Cost != uint64(2*time.Millisecond) {
		t.Fatalf("chosen %d members %+v", e.Chosen, e.Members)
	}
	if got := pickIndex(p, &f, idx); got != 1 {
		t.Fatalf("explained b1, picked %d", got)
	}
	// Two flows on b1: (2+1) x 2ms = 6ms against b0's 4ms.
	ms[1].Backend.Acquire()
	ms[1].Backend.Acquire()
	if e := explain(t, p, &f); e.Chosen != 0 {
		t.Fatalf("b1 loaded: chose %d (%+v)", e.Chosen, e.Members)
	}
	if got := pickIndex(p, &f, idx); got != 0 {
		t.Fatalf("explained b0, picked %d", got)
	}
	releaseAll(ms)
}

// TestExplainRoundRobinNext: Next is the member the next pick goes to.
func TestExplainRoundRobinNext(t *testing.T) {
	ms := makeMembers(100, 300, 200)
	idx := index(ms)
	p := mustNew(t, Options{}, ms)
	f := flows(1, 1)[0]
	for range 50 {
		e := explain(t, p, &f)
		if e.Chosen != -1 || e.Members[1].Share != 0.5 {
			t.Fatalf("%+v", e)
		}
		if got := pickIndex(p, &f, idx); got != e.Next {
			t.Fatalf("explained next %d, picked %d", e.Next, got)
		}
	}
}

// TestExplainChance: random and p2c name no backend, unless there is one.
func TestExplainChance(t *testing.T) {
	f := flows(1, 1)[0]
	for _, alg := range []l4.Algorithm{l4.Random, l4.P2C, l4.RoundRobin} {
		if e := explain(t, mustNew(t, Options{Algorithm: alg}, makeMembers(1, 2)), &f); e.Chosen != -1 {
			t.Fatalf("%s of two: chose %d", alg, e.Chosen)
		}
		if e := explain(t, mustNew(t, Options{Algorithm: alg}, makeMembers(7)), &f); e.Chosen != 0 {
			t.Fatalf("%s of one: chose %d", alg, e.Chosen)
		}
	}
	ms := makeMembers(100, 300)
	ms[1].Backend.Acquire()
	e := explain(t, mustNew(t, Options{Algorithm: l4.P2C}, ms), &f)
	if e.Members[1].Load != 1.0/300 || e.Members[0].Share != 0.25 {
		t.Fatalf("p2c members %+v", e.Members)
	}
	if e := explain(t, mustNew(t, Options{}, nil), &f); e.Chosen != -1 || e.Rule != ruleNone {
		t.Fatalf("no members: %+v", e)
	}
}
