// Tests of the precomputed smooth weighted round robin and the alias table.

package balance

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The sequence is nginx's: weights 5,1,1 give a a b a c a a.
func TestSWRRSequence(t *testing.T) {
	tests := []struct {
		weights []uint64
		want    string
	}{
		{[]uint64{5, 1, 1}, "aabacaa"},
		{[]uint64{1, 1, 1}, "abc"},
		{[]uint64{4, 2, 1}, "abacaba"}, // smooth: no run of a where none is needed
		{[]uint64{300, 100}, "aaba"},   // divided by the gcd first
	}
	for _, tt := range tests {
		var got []byte
		for _, i := range swrrSequence(rrWeights(tt.weights)) {
			got = append(got, 'a'+byte(i))
		}
		if string(got) != tt.want {
			t.Errorf("weights %v: %s, want %s", tt.weights, got, tt.want)
		}
	}
}

// Large weight sums are scaled into max(rrMaxSeq, n) entries (+ n for the
// >= 1 floor), keeping each share within 2^-13 of its weight share, at
// sizes on both sides of the nginx / stride switch.
func TestRoundRobinBounded(t *testing.T) {
	sizes := []int{3, 100, 1000, 5000}
	if testing.Short() {
		sizes = sizes[:3]
	}
	for _, n := range sizes {
		r := rand.New(rand.NewPCG(uint64(n), 0))
		ws := make([]uint64, n)
		var sum float64
		for i := range ws {
			ws[i] = 1 + r.Uint64N(1000)
			sum += float64(ws[i])
		}
		seq := rrSequence(ws)
		if limit := max(rrMaxSeq, n) + n; len(seq) > limit {
			t.Errorf("n=%d: sequence of %d, limit %d", n, len(seq), limit)
		}
		count := make([]int, n)
		for _, i := range seq {
			count[i]++
		}
		for i, w := range ws {
			got, want := float64(count[i])/float64(len(seq)), float64(w)/sum
			if math.Abs(got-want) > 1.0/(1<<13) {
				t.Fatalf("n=%d backend %d: share %.6f, want %.6f", n, i, got, want)
			}
		}
	}
}

// Both generators are smooth: in every prefix of the period each member
// has within 2 entries of its exact share (measured: nginx < 1, stride
// 1.5).
func TestRoundRobinSmooth(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for trial := range 200 {
		ws := make([]uint64, 2+r.IntN(12))
		var total uint64
		for i := range ws {
			ws[i] = 1 + r.Uint64N(40)
			total += ws[i]
		}
		for name, seq := range map[string][]uint32{"nginx": swrrSequence(ws), "stride": strideSequence(ws, total)} {
			if d := maxDeviation(seq, ws, total); d > 2 {
				t.Fatalf("trial %d %s weights %v: a prefix is %.2f entries off", trial, name, ws, d)
			}
		}
	}
}

// maxDeviation returns the largest |count_i(prefix) - len(prefix) x w_i/total|.
func maxDeviation(seq []uint32, ws []uint64, total uint64) float64 {
	count := make([]float64, len(ws))
	var worst float64
	for l, i := range seq {
		count[i]++
		for j, w := range ws {
			worst = max(worst, math.Abs(count[j]-float64(l+1)*float64(w)/float64(total)))
		}
	}
	if len(seq) != int(total) {
		return math.Inf(1)
	}
	return worst
}

// A retry takes the next sequence entries: with one member tried, the
// others keep their relative shares.
func TestRoundRobinRetry(t *testing.T) {
	ms := makeMembers(2, 1, 1) // sequence a b c a
	p := mustNew(t, Options{}, ms)
	var tried Tried
	tried.Add(ms[0].Backend)
	idx := index(ms)
	count := make([]int, 3)
	for range 1000 {
		b := p.Pick(nil, &tried)
		count[idx[b]]++
		b.Release()
	}
	if count[0] != 0 || count[1] != 500 || count[2] != 500 {
		t.Errorf("retry picks %v, want 0, 500, 500", count)
	}
}

// The alias table's exact probabilities equal the weight shares.
func TestAliasTableExact(t *testing.T) {
	for _, ws := range [][]uint64{{1}, {1, 1}, {1, 2, 3, 4}, {1000, 1, 1, 1}, {7, 0x10000, 3, 999, 12}} {
		tab := newAliasTable(ws)
		n := float64(len(ws))
		p := make([]float64, len(ws))
		for c := range ws {
			keep := float64(tab.prob[c]) / math.Exp2(32)
			p[c] += keep / n
			p[tab.alias[c]] += (1 - keep) / n
		}
		var sum float64
		for _, w := range ws {
			sum += float64(w)
		}
		for i, w := range ws {
			if math.Abs(p[i]-float64(w)/sum) > float64(len(ws))/math.Exp2(32) {
				t.Errorf("weights %v: P(%d) = %.12f, want %.12f", ws, i, p[i], float64(w)/sum)
			}
		}
	}
}
