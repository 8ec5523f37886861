// Tests of the shard index: probing, backward-shift deletion, growth, slab reuse.

package conntrack

import (
	"math/rand/v2"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// checkShard fails unless every key in want is found at its slot, the index
// holds nothing else, and the load stays at most 3/4.
func checkShard(t *testing.T, s *shard, want map[Key]uint32) {
	t.Helper()
	used := 0
	for _, v := range s.index {
		if v != 0 {
			used++
		}
	}
	if used != len(want) || s.n != len(want) {
		t.Fatalf("index holds %d, n %d, want %d", used, s.n, len(want))
	}
	if used*4 > len(s.index)*3 {
		t.Errorf("load %d/%d over 3/4", used, len(s.index))
	}
	for k, tag := range want {
		_, slot, ok := s.find(&k, tag)
		if !ok || s.at(slot).key != k || !s.at(slot).live {
			t.Fatalf("key %v (tag %#x) lost", k, tag)
		}
	}
}

// shardAdd inserts k with a chosen tag, growing as Insert would.
func shardAdd(s *shard, k Key, tag uint32) {
	if s.crowded() {
		s.grow()
	}
	pos, _, _ := s.find(&k, tag)
	s.add(pos, &k, tag, nil, nil, 0)
}

// TestIndexCollisions drives the index with tags chosen to collide and to
// wrap around the end of the table, deleting in many orders.
func TestIndexCollisions(t *testing.T) {
	tagSets := map[string][]uint32{
		"one home":       {5, 5, 5, 5, 5},
		"wrap":           {7, 7, 6, 7, 0, 6},
		"runs merge":     {1, 2, 1, 3, 2, 4},
		"distinct homes": {0, 1, 2, 3, 4, 5},
		"equal tags":     {0x10007, 0x10007, 0x20007, 7, 7},
	}
	for name, tags := range tagSets {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			for round := 0; round < 50; round++ {
				var s shard
				s.reset()
				want := map[Key]uint32{}
				for i, tag := range tags {
					k := flowKey(i, l4.TCP)
					shardAdd(&s, k, tag)
					want[k] = tag
				}
				checkShard(t, &s, want)
				for _, i := range r.Perm(len(tags)) {
					k := flowKey(i, l4.TCP)
					_, slot, _ := s.find(&k, tags[i])
					s.remove(slot)
					delete(want, k)
					checkShard(t, &s, want)
				}
			}
		})
	}
}

// TestIndexAgainstMap runs random inserts and removes through one shard,
// with real hashes, and compares with a Go map at every step.
func TestIndexAgainstMap(t *testing.T) {
	var s shard
	s.reset()
	sd := newSeed()
	r := rand.New(rand.NewPCG(3, 4))
	want := map[Key]uint32{}
	for step := 0; step < 20000; step++ {
		k := flowKey(r.IntN(600), l4.UDP)
		tag := uint32(sd.hash(&k))
		_, slot, ok := s.find(&k, tag)
		if _, in := want[k]; in != ok {
			t.Fatalf("step %d: find = %v, map says %v", step, ok, in)
		}
		if ok {
			s.remove(slot)
			delete(want, k)
		} else {
			shardAdd(&s, k, tag)
			want[k] = tag
		}
		if step%997 == 0 {
			checkShard(t, &s, want)
		}
	}
	checkShard(t, &s, want)
	if int(s.used) > 600 {
		t.Errorf("slab grew to %d slots for at most 600 live entries: free slots not reused", s.used)
	}
}
