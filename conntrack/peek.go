// Peek and Range: reading the table for an operator's question without
// touching it (no refresh, no hit or miss counted).

package conntrack

import (
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Peeked is an entry as Peek and Range report it: a copy, with how long
// it has been idle and how long until it expires if nothing uses it.
type Peeked struct {
	Entry
	// Idle is the time since the entry's last insert or lookup, to the
	// table's tick (the clock advances once per tick, on the sweeper).
	Idle time.Duration
	// Timeout is its protocol's idle timeout; the sweeper ends the entry
	// once Idle reaches it.
	Timeout time.Duration
}

// Peek returns k's entry without refreshing it and without counting a
// lookup: for explaining what the data path would do, never for the data
// path itself (whose Lookup keeps a used flow alive).
func (t *Table) Peek(k Key) (Peeked, bool) {
	s, tag := t.locate(&k)
	now := t.clock.Load()
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, slot, ok := s.find(&k, tag)
	if !ok {
		return Peeked{}, false
	}
	return t.peeked(s.at(slot), now), true
}

// peeked copies e with its age (caller holds the shard's lock).
func (t *Table) peeked(e *entry, now uint32) Peeked {
	return Peeked{
		Entry:   exportEntry(e),
		Idle:    time.Duration(now-e.last.Load()) * t.tick,
		Timeout: t.IdleTimeout(e.key.proto),
	}
}

// IdleTimeout returns protocol p's idle timeout, as SetIdle last set it.
func (t *Table) IdleTimeout(p l4.Protocol) time.Duration {
	return time.Duration(t.idle(p)) * t.tick
}

// Range calls fn with a copy of every live entry, shard by shard, until fn
// returns false. Like Peek it refreshes nothing. Entries inserted or ended
// meanwhile may be missed or seen; fn runs with no lock held, so it may
// call the table. It copies a shard's entries at a time: for occasional
// questions (an operator's), not for the data path.
func (t *Table) Range(fn func(Key, Peeked) bool) {
	var buf []rangeEntry
	for i := range t.shards {
		buf = t.copyShard(&t.shards[i], buf[:0])
		for _, r := range buf {
			if !fn(r.key, r.p) {
				return
			}
		}
		clear(buf) // drop the owners until the next shard's copy
	}
}

type rangeEntry struct {
	key Key
	p   Peeked
}

// copyShard appends a copy of s's live entries to buf.
func (t *Table) copyShard(s *shard, buf []rangeEntry) []rangeEntry {
	now := t.clock.Load()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for slot := uint32(0); slot < s.used; slot++ {
		if e := s.at(slot); e.live {
			buf = append(buf, rangeEntry{key: e.key, p: t.peeked(e, now)})
		}
	}
	return buf
}

// Peek returns the backend client is pinned to on vip, without
// refreshing the pin (Get refreshes it), with its age.
func (a *Affinity) Peek(vip l4.VIPKey, client netip.Addr) (Peeked, bool) {
	return a.t.Peek(AffinityKey(vip, client))
}

// Timeout returns how long a pin lasts unused.
func (a *Affinity) Timeout() time.Duration { return a.t.IdleTimeout(l4.TCP) }
