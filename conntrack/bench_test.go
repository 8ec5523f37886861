// Benchmarks: lookup (serial and parallel), insert, churn, eviction, bytes per entry.

package conntrack

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// benchSizes are the table sizes lookups run at: a hot set that fits in
// cache, one that fits in the last-level cache, and a production-sized
// table that does not.
var benchSizes = []int{1 << 10, 1 << 16, 1 << 20}

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
			cpu := newCPUMeter(b)
			for i := 0; i < b.N; i++ {
				if _, ok := tb.Lookup(ks[i&(n-1)]); !ok {
					b.Fatal("miss")
				}
			}
			cpu.report()
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
			cpu := newCPUMeter(b)
			b.RunParallel(func(pb *testing.PB) {
				for i := n / 3; pb.Next(); i++ { // goroutines start apart
					if _, ok := tb.Lookup(ks[i&(n-1)]); !ok {
						b.Error("miss")
						return
					}
				}
			})
			cpu.report() // summed over goroutines: compare with ns/op x GOMAXPROCS
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
			cpu := newCPUMeter(b)
			for done := 0; done < b.N; done += n {
				fill(done, min(done+n, b.N))
				cpu.pause()
				b.StopTimer()
				empty()
				b.StartTimer()
				cpu.resume()
			}
			cpu.report()
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
	cpu := newCPUMeter(b)
	for i := 0; i < b.N; i++ {
		if i%n == 0 && i > 0 {
			cpu.pause()
			b.StopTimer()
			tb.Close()
			tb = fresh()
			b.StartTimer()
			cpu.resume()
		}
		bs[0].Acquire()
		tb.Insert(ks[i%n], bs[0], nil)
	}
	cpu.report()
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
	cpu := newCPUMeter(b)
	for i := 0; i < b.N; i++ {
		bs[0].Acquire()
		tb.Insert(ks[(i+live)%n], bs[0], nil)
		tb.Delete(ks[i%n])
	}
	cpu.report()
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
	cpu := newCPUMeter(b)
	for i := 0; i < b.N; i++ {
		bs[0].Acquire()
		tb.Insert(ks[i%n], bs[0], nil)
	}
	cpu.report()
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

// cpuMeter adds a cpu-ns/op metric: the process's CPU time per op. On a
// busy shared machine wall time also counts other tenants' time slices;
// CPU time mostly does not, so it shows the code's own cost more steadily.
type cpuMeter struct {
	b     *testing.B
	spent time.Duration
	since time.Duration
}

func newCPUMeter(b *testing.B) *cpuMeter { return &cpuMeter{b: b, since: cpuTime()} }

func (m *cpuMeter) pause()  { m.spent += cpuTime() - m.since }
func (m *cpuMeter) resume() { m.since = cpuTime() }

// report pauses the meter and reports its total per op.
func (m *cpuMeter) report() {
	m.pause()
	m.b.ReportMetric(float64(m.spent)/float64(m.b.N), "cpu-ns/op")
}

// cpuTime returns the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapLive returns the live heap after a full collection.
func heapLive() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
