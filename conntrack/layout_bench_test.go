// Benchmarks of the layouts not taken (Go map per shard, by pointer and by value) and of the hash, for the design record.

package conntrack

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// mapEntry is what a map-based shard would hold: the entry without the key
// (the map has it) and without the index tag.
type mapEntry struct {
	last    atomic.Uint32
	state   State
	backend *l4.Backend
	owner   any
}

// mapValue is mapEntry stored by value: last can no longer be stored under
// the read lock, so a refresh would need the write lock.
type mapValue struct {
	last    uint32
	state   State
	backend *l4.Backend
	owner   any
}

// mapTable is the layout the brief first suggested, in both value kinds.
type mapTable[V any] struct {
	seed   seed
	shards [DefaultShards]struct {
		mu sync.RWMutex
		m  map[Key]V
	}
}

func newMapTable[V any]() *mapTable[V] {
	t := &mapTable[V]{seed: newSeed()}
	for i := range t.shards {
		t.shards[i].m = map[Key]V{}
	}
	return t
}

func (t *mapTable[V]) shard(k *Key) int { return int(t.seed.hash(k) >> 58) }

func (t *mapTable[V]) put(k Key, v V) {
	s := &t.shards[t.shard(&k)]
	s.mu.Lock()
	s.m[k] = v
	s.mu.Unlock()
}

func (t *mapTable[V]) get(k Key) (V, bool) {
	s := &t.shards[t.shard(&k)]
	s.mu.RLock()
	v, ok := s.m[k]
	s.mu.RUnlock()
	return v, ok
}

func BenchmarkLayoutLookup(b *testing.B) {
	bs, _ := newBackends(1)
	for _, n := range benchSizes {
		ks := benchKeys(n)
		ptr, val := newMapTable[*mapEntry](), newMapTable[mapValue]()
		for _, k := range ks {
			ptr.put(k, &mapEntry{backend: bs[0]})
			val.put(k, mapValue{backend: bs[0]})
		}
		b.Run(fmt.Sprintf("map=pointer/flows=%d", n), func(b *testing.B) {
			cpu := newCPUMeter(b)
			defer cpu.report()
			for i := 0; i < b.N; i++ {
				e, ok := ptr.get(ks[i&(n-1)])
				if !ok {
					b.Fatal("miss")
				}
				if e.last.Load() != 0 { // the refresh check Lookup does
					e.last.Store(0)
				}
			}
		})
		b.Run(fmt.Sprintf("map=value/flows=%d", n), func(b *testing.B) {
			cpu := newCPUMeter(b)
			defer cpu.report()
			for i := 0; i < b.N; i++ {
				if _, ok := val.get(ks[i&(n-1)]); !ok {
					b.Fatal("miss")
				}
			}
		})
	}
}

func BenchmarkLayoutBytesPerEntry(b *testing.B) {
	const n = 1_000_000
	ks := benchKeys(n)
	bs, _ := newBackends(1)
	b.Run("map=pointer", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			before := heapLive()
			t := newMapTable[*mapEntry]()
			for _, k := range ks {
				t.put(k, &mapEntry{backend: bs[0]})
			}
			b.ReportMetric(float64(heapLive()-before)/n, "B/entry")
			runtime.KeepAlive(t)
		}
	})
	b.Run("map=value", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			before := heapLive()
			t := newMapTable[mapValue]()
			for _, k := range ks {
				t.put(k, mapValue{backend: bs[0]})
			}
			b.ReportMetric(float64(heapLive()-before)/n, "B/entry")
			runtime.KeepAlive(t)
		}
	})
}

func BenchmarkHash(b *testing.B) {
	ks := benchKeys(1024)
	var sink uint64
	b.Run("wyhash-key", func(b *testing.B) {
		s := newSeed()
		for i := 0; i < b.N; i++ {
			sink += s.hash(&ks[i&1023])
		}
	})
	b.Run("maphash.Comparable", func(b *testing.B) {
		s := maphash.MakeSeed()
		for i := 0; i < b.N; i++ {
			sink += maphash.Comparable(s, ks[i&1023])
		}
	})
	_ = sink
}
