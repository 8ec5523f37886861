// Benchmarks: lookup (serial and parallel), insert, churn, eviction, bytes per entry.
package conntrack

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// benchSizes are the table sizes lookups run at: a hot set that fits in
// cache, and a production-sized table that does not.
var benchSizes = []int{1 << 10, 1 << 20}

// benchKeys returns n distinct keys.
func benchKeys(n int) []Key {
	ks := make([]Key, n)
	for i := range ks {
		ks[i] = flowKey(i, l4.TCP)
	}
	return ks
}

// filled returns a table holding every key, pinned to one backend.
func filled(b *testing.B, ks []Key) *Table {
	tb := mustNew(b, Options{MaxEntries: 2 * len(ks), Uncounted: true})
	bs, _ := newBackends(1)
	for _, k := range ks {
		tb.Insert(k, bs[0], nil)
	}
	return tb
}

func BenchmarkLookup(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			ks := benchKeys(n)
			tb := filled(b, ks)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, ok := tb.Lookup(ks[i&(n-1)]); !ok {
					b.Fatal("miss")
				}
			}
		})
	}
}

func BenchmarkLookupParallel(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			ks := benchKeys(n)
			tb := filled(b, ks)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for i := n / 3; pb.Next(); i++ { // goroutines start apart
					if _, ok := tb.Lookup(ks[i&(n-1)]); !ok {
						b.Error("miss")
						return
					}
				}
			})
		})
	}
}

// BenchmarkInsert measures inserts into a warm table (its index and slab
// already grown), with the balancer's Acquire that precedes each. Every n
// inserts the table is emptied, untimed.
func BenchmarkInsert(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			ks := benchKeys(n)
			bs, _ := newBackends(1)
			tb := mustNew(b, Options{MaxEntries: 2 * n})
			fill := func(from, to int) {
				for i := from; i < to; i++ {
					bs[0].Acquire()
					tb.Insert(ks[i%n], bs[0], nil)
				}
			}
			empty := func() {
				for _, k := range ks {
					tb.Delete(k)
				}
			}
			fill(0, n)
			empty()
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += n {
				fill(done, min(done+n, b.N))
				b.StopTimer()
				empty()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkInsertGrow fills fresh tables from empty to 1<<20 flows, so it
// includes index doublings and slab chunk allocations. Replacing a full
// table is untimed.
func BenchmarkInsertGrow(b *testing.B) {
	const n = 1 << 20
	ks := benchKeys(n)
	bs, _ := newBackends(1)
	fresh := func() *Table {
		tb, err := New(Options{MaxEntries: 2 * n})
		if err != nil {
			b.Fatal(err)
		}
		return tb
	}
	tb := fresh()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%n == 0 && i > 0 {
			b.StopTimer()
			tb.Close()
			tb = fresh()
			b.StartTimer()
		}
		bs[0].Acquire()
		tb.Insert(ks[i%n], bs[0], nil)
	}
	b.StopTimer()
	tb.Close()
}

// BenchmarkChurn is the steady state: 64k live flows, each op inserts a new
// flow and deletes the oldest, reusing slab slots.
func BenchmarkChurn(b *testing.B) {
	const live, n = 1 << 16, 1 << 20
	ks := benchKeys(n)
	bs, _ := newBackends(1)
	tb := mustNew(b, Options{MaxEntries: 4 * live})
	for i := 0; i < live; i++ {
		bs[0].Acquire()
		tb.Insert(ks[i], bs[0], nil)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bs[0].Acquire()
		tb.Insert(ks[(i+live)%n], bs[0], nil)
		tb.Delete(ks[i%n])
	}
}

// BenchmarkInsertEvict inserts into a full table: every insert evicts.
func BenchmarkInsertEvict(b *testing.B) {
	const capacity, n = 1 << 16, 1 << 20
	ks := benchKeys(n)
	bs, _ := newBackends(1)
	tb := mustNew(b, Options{MaxEntries: capacity})
	for i := 0; i < 2*capacity; i++ {
		bs[0].Acquire()
		tb.Insert(ks[i], bs[0], nil)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bs[0].Acquire()
		tb.Insert(ks[i%n], bs[0], nil)
	}
}

// BenchmarkBytesPerEntry reports live heap per entry of a table holding a
// million flows (index, slab and shard overhead; not the keys slice).
func BenchmarkBytesPerEntry(b *testing.B) {
	const n = 1_000_000
	ks := benchKeys(n)
	bs, _ := newBackends(1)
	for i := 0; i < b.N; i++ {
		before := heapLive()
		tb, err := New(Options{MaxEntries: 2 * n, Uncounted: true})
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range ks {
			tb.Insert(k, bs[0], nil)
		}
		b.ReportMetric(float64(heapLive()-before)/n, "B/entry")
		runtime.KeepAlive(tb)
		tb.Close()
	}
}

// heapLive returns the live heap after a full collection.
func heapLive() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
