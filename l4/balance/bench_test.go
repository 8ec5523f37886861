// Benchmarks: Pick for every algorithm at 3, 16 and 1000 members, and table builds.

package balance

import (
	"fmt"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// benchMembers returns n members with mixed weights (50..250) and RTT
// samples (0.5..1.1 ms), as a VIP in service would have.
func benchMembers(n int) []Member {
	ws := make([]uint32, n)
	for i := range ws {
		ws[i] = 50 + 50*uint32(i%5)
	}
	ms := makeMembers(ws...)
	for i, m := range ms {
		m.Backend.ObserveRTT(time.Duration(500+100*(i%7)) * time.Microsecond)
	}
	return ms
}

// BenchmarkPick measures one Pick plus the Release that ends the flow (so
// counts stay bounded), over 1024 distinct flows. The two atomic updates
// of Acquire and the two of Release are part of every figure.
func BenchmarkPick(b *testing.B) {
	fs := flows(1024, 99)
	type variant struct {
		name string
		opts Options
	}
	var vs []variant
	for _, alg := range allAlgorithms {
		vs = append(vs, variant{alg.String(), Options{Algorithm: alg}})
	}
	vs = append(vs,
		variant{"source_hash_bounded", Options{Algorithm: l4.SourceHash, BalanceFactor: 125}},
		variant{"maglev_bounded", Options{Algorithm: l4.Maglev, BalanceFactor: 125}})
	for _, v := range vs {
		for _, n := range []int{3, 16, 1000} {
			b.Run(fmt.Sprintf("%s/n=%d", v.name, n), func(b *testing.B) {
				p := mustNew(b, v.opts, benchMembers(n))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					p.Pick(&fs[i&1023], nil).Release()
					i++
				}
			})
		}
	}
}

// BenchmarkAcquireRelease is the floor under every BenchmarkPick figure:
// the backend's and the VIP's counters, up on Acquire and down on Release
// (four atomic read-modify-writes, none of them this package's).
func BenchmarkAcquireRelease(b *testing.B) {
	be := benchMembers(1)[0].Backend
	for b.Loop() {
		be.Acquire()
		be.Release()
	}
}

// BenchmarkPickParallel is BenchmarkPick at 16 members from every P: the
// shared cursor and counters under contention.
func BenchmarkPickParallel(b *testing.B) {
	fs := flows(1024, 99)
	for _, alg := range allAlgorithms {
		b.Run(alg.String(), func(b *testing.B) {
			p := mustNew(b, Options{Algorithm: alg}, benchMembers(16))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					p.Pick(&fs[i&1023], nil).Release()
					i++
				}
			})
		})
	}
}

func BenchmarkMaglevTable(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ms := benchMembers(n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := MaglevTable(ms, DefaultMaglevSize); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNew measures snapshot-rebuild cost of the other prebuilt tables.
func BenchmarkNew(b *testing.B) {
	for _, alg := range []l4.Algorithm{l4.RoundRobin, l4.SourceHash, l4.Random} {
		for _, n := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/n=%d", alg, n), func(b *testing.B) {
				ms := benchMembers(n)
				for b.Loop() {
					mustNew(b, Options{Algorithm: alg}, ms)
				}
			})
		}
	}
}
