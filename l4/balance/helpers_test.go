// Test helpers: member sets that share a VIP counter, and reproducible flows.

package balance

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// allAlgorithms lists every algorithm, for table-driven tests.
var allAlgorithms = []l4.Algorithm{l4.RoundRobin, l4.LeastConn, l4.P2C, l4.LeastTime, l4.SourceHash, l4.Maglev, l4.Random}

// eachBounded runs f as subtest "ALG/factor=F" for every algorithm in
// algs, unbounded (factor 0) and bounded (factor 125).
func eachBounded(t *testing.T, algs []l4.Algorithm, f func(t *testing.T, opts Options)) {
	t.Helper()
	for _, alg := range algs {
		for _, factor := range []uint32{0, 125} {
			opts := Options{Algorithm: alg, BalanceFactor: factor}
			t.Run(fmt.Sprintf("%s/factor=%d", alg, factor), func(t *testing.T) { f(t, opts) })
		}
	}
}

// setCaps gives member i the cap caps[i].
func setCaps(ms []Member, caps ...int64) {
	for i, c := range caps {
		ms[i].Backend.SetMaxFlows(c)
	}
}

// makeMembers returns one member per weight, IDs "b000", "b001", ... (so
// already sorted), all reporting into one fresh VIP counter.
func makeMembers(weights ...uint32) []Member {
	vip := new(l4.FlowCounter)
	ms := make([]Member, len(weights))
	for i, w := range weights {
		id := l4.BackendID(fmt.Sprintf("b%03d", i))
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(1 + i/250), byte(1 + i%250)}), 5432)
		ms[i] = Member{Backend: l4.NewBackend(id, addr, vip), Weight: w}
	}
	return ms
}

// equal returns n weights of w.
func equal(n int, w uint32) []uint32 {
	ws := make([]uint32, n)
	for i := range ws {
		ws[i] = w
	}
	return ws
}

// flows returns n reproducible client flows to one VIP from random IPv4
// and IPv6 clients and ports.
func flows(n int, seed uint64) []l4.Flow {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	dst := netip.MustParseAddrPort("198.18.0.10:5432")
	fs := make([]l4.Flow, n)
	for i := range fs {
		var src netip.Addr
		if r.IntN(4) == 0 {
			var a [16]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			src = netip.AddrFrom16(a)
		} else {
			src = netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		}
		fs[i] = l4.Flow{Src: netip.AddrPortFrom(src, uint16(1024+r.IntN(60000))), Dst: dst, Proto: l4.TCP}
	}
	return fs
}

// mustNew builds a picker or fails the test.
func mustNew(t testing.TB, opts Options, ms []Member) Picker {
	t.Helper()
	p, err := New(opts, ms)
	if err != nil {
		t.Fatalf("New(%s): %v", opts.Algorithm, err)
	}
	return p
}

// index maps each member's backend to its position.
func index(ms []Member) map[*l4.Backend]int {
	m := make(map[*l4.Backend]int, len(ms))
	for i, mb := range ms {
		m[mb.Backend] = i
	}
	return m
}

// shares returns each weight's share of the total.
func shares(weights []uint32) []float64 {
	var sum float64
	for _, w := range weights {
		sum += float64(w)
	}
	out := make([]float64, len(weights))
	for i, w := range weights {
		out[i] = float64(w) / sum
	}
	return out
}

// releaseAll ends every live flow of ms.
func releaseAll(ms []Member) {
	for _, m := range ms {
		for m.Backend.LiveFlows() > 0 {
			m.Backend.Release()
		}
	}
}
