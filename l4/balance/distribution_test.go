// Every algorithm shares traffic by weight, and every Pick honours the contract (tried, Acquire, empty sets).

package balance

import (
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// Over 100k picks each backend gets its weight share. keep says whether
// flows stay live (the load-aware rules balance live flows, so they are
// tested with flows kept; an idle least_conn sees only ties). tol bounds
// |share/weight share - 1|:
//   - round_robin: exact per period (0.1%);
//   - random, idle p2c, maglev: binomial sampling, 5% is about 5 sigma for
//     the smallest share (0.1 of 100k picks);
//   - least_conn: exact to one flow a backend (1%); kept p2c converges to
//     the same ratio (3%); least_time with equal RTTs has (live+1) by
//     weight (2%);
//   - source_hash: arc shares of 256..1024 vnodes a backend spread ~3-6%,
//     plus sampling (12%).
func TestDistribution(t *testing.T) {
	weights := []uint32{100, 200, 300, 400}
	tests := []struct {
		alg  l4.Algorithm
		keep bool
		tol  float64
	}{
		{l4.RoundRobin, false, 0.001},
		{l4.Random, false, 0.05},
		{l4.P2C, false, 0.05},
		{l4.P2C, true, 0.03},
		{l4.LeastConn, true, 0.01},
		{l4.LeastTime, true, 0.02},
		{l4.SourceHash, false, 0.12},
		{l4.Maglev, false, 0.05},
	}
	const picks = 100000
	fs := flows(picks, 42)
	for _, tt := range tests {
		name := tt.alg.String()
		if tt.keep {
			name += "/kept"
		}
		t.Run(name, func(t *testing.T) {
			ms := makeMembers(weights...)
			p := mustNew(t, Options{Algorithm: tt.alg}, ms)
			idx := index(ms)
			got := make([]int, len(ms))
			for i := range picks {
				b := p.Pick(&fs[i], nil)
				got[idx[b]]++
				if !tt.keep {
					b.Release()
				}
			}
			var worst float64
			for i, want := range shares(weights) {
				share := float64(got[i]) / picks
				worst = max(worst, share/want-1, 1-share/want)
				if r := share/want - 1; r > tt.tol || -r > tt.tol {
					t.Errorf("backend %d: share %.4f, want %.4f +- %.1f%%", i, share, want, 100*tt.tol)
				}
			}
			t.Logf("worst relative share error %.2f%% (tolerance %.1f%%)", 100*worst, 100*tt.tol)
		})
	}
}

// Every algorithm: an empty member list gives nil; picks with a growing
// tried set return distinct backends, each counted live, until every
// member was tried, then nil; bounded or not.
func TestPickContract(t *testing.T) {
	eachBounded(t, allAlgorithms, func(t *testing.T, opts Options) {
		if p := mustNew(t, opts, nil); p.Pick(flow("10.0.0.1:1", "10.0.0.2:2", l4.TCP), nil) != nil {
			t.Fatal("empty picker returned a backend")
		}
		ms := makeMembers(3, 1, 2, 5, 1)
		p := mustNew(t, opts, ms)
		var tried Tried
		f := flow("10.0.0.1:1", "10.0.0.2:2", l4.TCP)
		for range ms {
			b := p.Pick(f, &tried)
			if b == nil || tried.Has(b) {
				t.Fatalf("pick %d: %v (tried %d)", tried.Len(), b, tried.Len())
			}
			if b.LiveFlows() != 1 {
				t.Fatalf("picked backend has %d live flows, want 1", b.LiveFlows())
			}
			tried.Add(b)
		}
		if b := p.Pick(f, &tried); b != nil {
			t.Fatalf("all tried, got %s", b.ID)
		}
		if vip := ms[0].Backend.VIPFlows().Load(); vip != int64(len(ms)) {
			t.Fatalf("VIP flows %d, want %d", vip, len(ms))
		}
	})
}

// A retry of a hashed flow goes where the key goes next, the same every
// time: two flows with the same key and the same tried set agree.
func TestHashedRetryStable(t *testing.T) {
	for _, alg := range []l4.Algorithm{l4.SourceHash, l4.Maglev} {
		ms := makeMembers(equal(10, 1)...)
		p := mustNew(t, Options{Algorithm: alg}, ms)
		for i, f := range flows(200, 8) {
			var t1, t2 Tried
			for range 3 {
				a, b := p.Pick(&f, &t1), p.Pick(&f, &t2)
				if a != b {
					t.Fatalf("%s flow %d: retries differ: %s vs %s", alg, i, a.ID, b.ID)
				}
				t1.Add(a)
				t2.Add(b)
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		ms   []Member
	}{
		{"unknown algorithm", Options{Algorithm: l4.Algorithm(99)}, makeMembers(1)},
		{"unknown hash key", Options{Algorithm: l4.Maglev, HashKey: l4.HashKey(9)}, makeMembers(1)},
		{"balance factor below 100", Options{Algorithm: l4.SourceHash, BalanceFactor: 99}, makeMembers(1)},
		{"negative least_time default", Options{Algorithm: l4.LeastTime, LeastTimeDefault: -1}, makeMembers(1)},
		{"maglev size not prime", Options{Algorithm: l4.Maglev, MaglevSize: 1000}, makeMembers(1)},
		{"zero weight", Options{}, []Member{{Backend: makeMembers(1)[0].Backend}}},
		{"duplicate id", Options{Algorithm: l4.SourceHash}, dupMembers()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.opts, tt.ms); err == nil {
				t.Error("no error")
			}
		})
	}
}

func dupMembers() []Member {
	ms := makeMembers(1, 1)
	ms[1].Backend.ID = ms[0].Backend.ID
	return ms
}

// Ties rotate: on an idle VIP (every count zero, flows released at once)
// least_conn and least_time (equal RTTs) spread equal members evenly
// instead of handing every tie to the first; each of 3 gets a third of
// 30000 picks within 5% (binomial: about 5 sigma).
func TestTiesRotate(t *testing.T) {
	for _, alg := range []l4.Algorithm{l4.LeastConn, l4.LeastTime} {
		t.Run(alg.String(), func(t *testing.T) {
			ms := makeMembers(1, 1, 1)
			p := mustNew(t, Options{Algorithm: alg}, ms)
			idx := index(ms)
			count := make([]int, len(ms))
			for range 30000 {
				b := p.Pick(nil, nil)
				count[idx[b]]++
				b.Release()
			}
			for i, c := range count {
				if c < 9500 || c > 10500 {
					t.Errorf("member %d: %d of 30000 picks, want 10000 +- 5%%", i, c)
				}
			}
		})
	}
}
