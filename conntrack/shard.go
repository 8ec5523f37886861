// shard: one lock's worth of the table, an open-addressing index over a slab of entries.

package conntrack

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/l4lb/l4lb/l4"
)

const (
	// chunkLen entries make one slab chunk: 128 x 72 B = 9216 B, which
	// the allocator rounds to 9472 (3% slack) and which never moves.
	chunkShift = 7
	chunkLen   = 1 << chunkShift
	chunkMask  = chunkLen - 1

	minIndex     = 8 // index slots of an empty shard
	evictSamples = 8 // entries sampled to pick an eviction victim
	cacheLine    = 64
)

// entry is one flow in a shard's slab (72 bytes). Everything but last is
// guarded by the shard's mutex; last is stored by lookups holding only the
// read lock.
type entry struct {
	key   Key // 38 bytes
	state State
	live  bool
	last  atomic.Uint32 // clock tick of the last insert or lookup
	// tag is the low 32 bits of the key's hash (the index home slot), so
	// that removal by slot needs no rehash. On a free entry it links the
	// free list instead (next free slot + 1).
	tag     uint32
	backend *l4.Backend
	owner   any
}

// chunk is a fixed block of the slab; entries never move once allocated.
type chunk [chunkLen]entry

// shardState is a shard without its padding. The fields lookups write (the
// lock and the hit counters) come first so that a lookup dirties one line.
type shardState struct {
	mu           sync.RWMutex
	hits, misses atomic.Uint64

	// index is the open-addressing table (linear probing, load <= 3/4):
	// 0 is empty, else tag<<32 | slot+1.
	index    []uint64
	chunks   []*chunk
	used     uint32 // slab slots ever handed out
	freeHead uint32 // first free slot + 1, 0 when none
	n        int    // live entries
	cursor   uint32 // next slab slot the sweeper looks at
	closed   bool

	// Counters written under mu but read without it by Stats.
	inserts, dups, rebinds atomic.Uint64
	ends                   [numReasons]atomic.Uint64
}

// shard pads shardState to whole cache lines so that neighbours in the
// shard array never share one.
type shard struct {
	shardState
	_ [(cacheLine - unsafe.Sizeof(shardState{})%cacheLine) % cacheLine]byte
}

// reset empties the shard and drops its memory. Caller holds mu.
func (s *shard) reset() {
	s.index = make([]uint64, minIndex)
	s.chunks, s.used, s.freeHead, s.n, s.cursor = nil, 0, 0, 0, 0
}

// at returns the entry in slab slot i.
func (s *shard) at(i uint32) *entry {
	return &s.chunks[i>>chunkShift][i&chunkMask]
}

// find returns where k is in the index, or the empty slot where it would go.
func (s *shard) find(k *Key, tag uint32) (pos int, slot uint32, ok bool) {
	mask := len(s.index) - 1
	for i := int(tag) & mask; ; i = (i + 1) & mask {
		v := s.index[i]
		if v == 0 {
			return i, 0, false
		}
		if uint32(v>>32) == tag && s.at(uint32(v)-1).key.equal(k) {
			return i, uint32(v) - 1, true
		}
	}
}

// posOf returns the index position that points at slot.
func (s *shard) posOf(tag, slot uint32) int {
	mask := len(s.index) - 1
	i := int(tag) & mask
	for uint32(s.index[i]) != slot+1 {
		i = (i + 1) & mask
	}
	return i
}

// add fills a fresh slab entry for k and points index position pos at it.
func (s *shard) add(pos int, k *Key, tag uint32, b *l4.Backend, owner any, now uint32) *entry {
	slot := s.alloc()
	e := s.at(slot)
	e.key, e.tag, e.backend, e.owner = *k, tag, b, owner
	e.state, e.live = initialState(k.proto), true
	e.last.Store(now)
	s.index[pos] = uint64(tag)<<32 | uint64(slot+1)
	s.n++
	return e
}

// alloc takes a free slab slot, growing the slab by a chunk when none is.
func (s *shard) alloc() uint32 {
	if s.freeHead != 0 {
		slot := s.freeHead - 1
		s.freeHead = s.at(slot).tag
		return slot
	}
	if int(s.used) == len(s.chunks)*chunkLen {
		s.chunks = append(s.chunks, new(chunk))
	}
	s.used++
	return s.used - 1
}

// remove unlinks slot from the index and frees it, dropping its references
// so the GC can collect the owner.
func (s *shard) remove(slot uint32) {
	e := s.at(slot)
	s.removeAt(s.posOf(e.tag, slot))
	e.backend, e.owner, e.live = nil, nil, false
	e.tag, s.freeHead = s.freeHead, slot+1
	s.n--
}

// removeAt empties index position i by backward-shift deletion: later
// members of the probe run move up into the hole, so the index needs no
// tombstones and lookups never slow down with churn.
func (s *shard) removeAt(i int) {
	mask := len(s.index) - 1
	for j := (i + 1) & mask; s.index[j] != 0; j = (j + 1) & mask {
		v := s.index[j]
		home := int(uint32(v>>32)) & mask
		if (j-home)&mask >= (j-i)&mask { // i lies on v's probe path
			s.index[i] = v
			i = j
		}
	}
	s.index[i] = 0
}

// crowded reports whether one more entry would push the load over 3/4.
func (s *shard) crowded() bool { return (s.n+1)*4 > len(s.index)*3 }

// grow doubles the index. Home slots come from the stored tags, so no key
// is rehashed.
func (s *shard) grow() {
	old := s.index
	s.index = make([]uint64, 2*len(old))
	mask := len(s.index) - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := int(uint32(v>>32)) & mask
		for s.index[i] != 0 {
			i = (i + 1) & mask
		}
		s.index[i] = v
	}
}

// victim picks the entry to evict: the longest idle of a few random live
// slots. At the cap the slab has no holes, so samples rarely miss.
func (s *shard) victim(now uint32) uint32 {
	best, bestAge, found := uint32(0), uint32(0), 0
	for try := 0; try < 4*evictSamples && found < evictSamples; try++ {
		slot := rand.Uint32N(s.used)
		e := s.at(slot)
		if !e.live {
			continue
		}
		if age := now - e.last.Load(); found == 0 || age > bestAge {
			best, bestAge = slot, age
		}
		found++
	}
	if found == 0 {
		best = s.firstLive()
	}
	return best
}

// firstLive returns the lowest live slot; the shard must not be empty.
func (s *shard) firstLive() uint32 {
	for slot := uint32(0); ; slot++ {
		if s.at(slot).live {
			return slot
		}
	}
}
