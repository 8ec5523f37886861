// Walking the whole table: rare (an upgrade hands every session to the
// next process), never on a packet's path.
package conntrack

// Range calls fn with a copy of every live entry, shard by shard under
// that shard's read lock, until fn returns false. fn must not call the
// table. Entries inserted or ended meanwhile may or may not be seen.
func (t *Table) Range(fn func(Key, Entry) bool) {
	for i := range t.shards {
		if !t.rangeShard(&t.shards[i], fn) {
			return
		}
	}
}

func (t *Table) rangeShard(s *shard, fn func(Key, Entry) bool) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for slot := uint32(0); slot < s.used; slot++ {
		if e := s.at(slot); e.live && !fn(e.key, exportEntry(e)) {
			return false
		}
	}
	return true
}
