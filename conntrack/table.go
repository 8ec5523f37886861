// Table: the sharded flow table and its per-flow operations.

package conntrack

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Errors callers branch on.
var (
	ErrClosed     = errors.New("conntrack: table closed")
	ErrNotFound   = errors.New("conntrack: no such flow")
	ErrNilBackend = errors.New("conntrack: nil backend")
	ErrStarted    = errors.New("conntrack: sweeper already started")
)

// Table is a sharded flow table. All methods are safe for concurrent use.
type Table struct {
	// Fixed by New.
	shards  []shard
	shift   uint // hash >> shift picks the shard
	seed    seed
	tick    time.Duration
	epoch   time.Time
	batch   int
	counted bool
	now     func() time.Time
	onStart func(Key, Entry)
	onEnd   func(Key, Entry, Reason)

	clock atomic.Uint32 // ticks since epoch, wrapping; stored only by Sweep

	shardCap atomic.Int64 // MaxEntries/shards; SetMaxEntries changes it

	tcpIdle atomic.Uint32 // in ticks; SetIdle changes them
	udpIdle atomic.Uint32

	sweepMu  sync.Mutex // serialises Sweep; guards the two below
	ticks    uint64     // ticks since epoch, unwrapped
	sweepBuf []ended

	life    sync.Mutex // guards the lifecycle below
	started bool
	closed  bool
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when the sweeper goroutine returns
}

// ended is an entry taken out of a shard, to be finished outside the lock.
type ended struct {
	key Key
	e   Entry
}

// New makes a table; its sweeper runs once Start is called.
func New(opts Options) (*Table, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Table{
		shards:  make([]shard, o.Shards),
		shift:   uint(64 - bits.TrailingZeros(uint(o.Shards))),
		seed:    newSeed(),
		tick:    o.Tick,
		epoch:   o.Now(),
		batch:   o.SweepBatch,
		counted: !o.Uncounted,
		now:     o.Now,
		onStart: o.OnStart,
		onEnd:   o.OnEnd,
		stop:    make(chan struct{}),
	}
	t.tcpIdle.Store(ticks(o.TCPIdle, o.Tick))
	t.udpIdle.Store(ticks(o.UDPIdle, o.Tick))
	t.shardCap.Store(int64(o.MaxEntries / o.Shards))
	for i := range t.shards {
		t.shards[i].reset()
	}
	return t, nil
}

// SetIdle changes the idle timeouts (0 keeps one as it is). They apply to
// every entry from the next sweep on, established ones included, as a
// change of Linux's conntrack timeouts does.
func (t *Table) SetIdle(tcp, udp time.Duration) error {
	o := Options{Tick: t.tick, TCPIdle: tcp, UDPIdle: udp}
	if err := o.checkIdle(); err != nil {
		return err
	}
	if tcp > 0 {
		t.tcpIdle.Store(ticks(tcp, t.tick))
	}
	if udp > 0 {
		t.udpIdle.Store(ticks(udp, t.tick))
	}
	return nil
}

// SetMaxEntries changes the cap on live entries (0 = the default). The
// number of shards stays what New chose, so each shard's cap becomes
// n/shards. Raising it costs nothing until entries fill it (slabs and
// indexes grow as entries come); lowering it evicts nothing at once, but
// an insert into a shard above the new cap evicts as usual.
func (t *Table) SetMaxEntries(n int) error {
	o := Options{MaxEntries: orDefault(n, DefaultMaxEntries), Tick: t.tick}
	if err := o.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	t.shardCap.Store(int64(max(o.MaxEntries/len(t.shards), 1)))
	return nil
}

// MaxEntries returns the cap on live entries (shards x per-shard cap).
func (t *Table) MaxEntries() int { return int(t.shardCap.Load()) * len(t.shards) }

// locate hashes k and returns its shard and index tag.
func (t *Table) locate(k *Key) (*shard, uint32) {
	h := t.seed.hash(k)
	return &t.shards[h>>t.shift], uint32(h)
}

// Lookup returns a copy of k's entry and refreshes its last-seen tick.
// It never allocates and takes only the shard's read lock.
func (t *Table) Lookup(k Key) (Entry, bool) {
	s, tag := t.locate(&k)
	now := t.clock.Load()
	s.mu.RLock()
	_, slot, ok := s.find(&k, tag)
	if !ok {
		s.mu.RUnlock()
		s.misses.Add(1)
		return Entry{}, false
	}
	e := s.at(slot)
	if e.last.Load() != now { // a store per tick, not per lookup
		e.last.Store(now)
	}
	out := exportEntry(e)
	s.mu.RUnlock()
	s.hits.Add(1)
	return out, true
}

// Insert pins k to b with owner hung on it, and takes ownership of one
// live-flow count on b in every case. If k is already present it returns
// the present entry and false, and releases the count (the caller disposes
// of owner). On a closed table it releases the count and returns ErrClosed.
// Inserting into a full shard evicts that shard's approximately oldest
// entry.
func (t *Table) Insert(k Key, b *l4.Backend, owner any) (Entry, bool, error) {
	if b == nil {
		return Entry{}, false, ErrNilBackend
	}
	s, tag := t.locate(&k)
	var buf [1]ended // room for an evicted entry, on the stack
	s.mu.Lock()
	out, inserted, ev, err := t.insertLocked(s, &k, tag, b, owner, buf[:0])
	s.mu.Unlock()
	if !inserted {
		t.release(b)
		return out, false, err
	}
	t.finish(ev, ReasonEvicted)
	if t.onStart != nil {
		t.onStart(k, out)
	}
	return out, true, nil
}

// insertLocked is Insert under s.mu. It appends the evicted entry, if any,
// to ev for the caller to finish once unlocked.
func (t *Table) insertLocked(s *shard, k *Key, tag uint32, b *l4.Backend, owner any, ev []ended) (Entry, bool, []ended, error) {
	if s.closed {
		return Entry{}, false, nil, ErrClosed
	}
	pos, slot, ok := s.find(k, tag)
	if ok {
		s.dups.Add(1)
		return exportEntry(s.at(slot)), false, nil, nil
	}
	now := t.clock.Load()
	if int64(s.n) >= t.shardCap.Load() {
		ev = t.take(s, s.victim(now), ReasonEvicted, ev)
		pos = -1 // removal may shift the probe run
	}
	if s.crowded() {
		s.grow()
		pos = -1
	}
	if pos < 0 {
		pos, _, _ = s.find(k, tag)
	}
	s.inserts.Add(1)
	return exportEntry(s.add(pos, k, tag, b, owner, now)), true, ev, nil
}

// Delete ends k's entry (ReasonDeleted) and reports whether there was one.
func (t *Table) Delete(k Key) bool {
	s, tag := t.locate(&k)
	var buf [1]ended
	gone := buf[:0]
	s.mu.Lock()
	_, slot, ok := s.find(&k, tag)
	if ok {
		gone = t.take(s, slot, ReasonDeleted, gone)
	}
	s.mu.Unlock()
	t.finish(gone, ReasonDeleted)
	return ok
}

// Rebind moves k's entry to backend b: it releases the old backend's count
// and takes ownership of one count on b (which the caller acquired) in every
// case, releasing it with ErrNotFound when k is absent. It refreshes the
// entry's last-seen tick.
func (t *Table) Rebind(k Key, b *l4.Backend) error {
	if b == nil {
		return ErrNilBackend
	}
	s, tag := t.locate(&k)
	s.mu.Lock()
	_, slot, ok := s.find(&k, tag)
	var old *l4.Backend
	if ok {
		e := s.at(slot)
		old, e.backend = e.backend, b
		e.last.Store(t.clock.Load())
		s.rebinds.Add(1)
	}
	s.mu.Unlock()
	if !ok {
		t.release(b)
		return ErrNotFound
	}
	t.release(old)
	return nil
}

// SetState records the flow's state and reports whether k was present.
func (t *Table) SetState(k Key, st State) bool {
	s, tag := t.locate(&k)
	s.mu.Lock()
	_, slot, ok := s.find(&k, tag)
	if ok {
		s.at(slot).state = st
	}
	s.mu.Unlock()
	return ok
}

// Len returns the number of live entries.
func (t *Table) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		n += s.n
		s.mu.RUnlock()
	}
	return n
}

// take removes slot from s (caller holds s.mu), counts the reason and
// appends the entry to buf for finish.
func (t *Table) take(s *shard, slot uint32, r Reason, buf []ended) []ended {
	e := s.at(slot)
	buf = append(buf, ended{key: e.key, e: exportEntry(e)})
	s.remove(slot)
	s.ends[r].Add(1)
	return buf
}

// finish releases each ended entry's count and reports it, outside any
// shard lock, then clears buf so it holds no owners.
func (t *Table) finish(buf []ended, r Reason) {
	for i := range buf {
		t.release(buf[i].e.Backend)
		if t.onEnd != nil {
			t.onEnd(buf[i].key, buf[i].e, r)
		}
		buf[i] = ended{}
	}
}

// release gives back one live-flow count on b, if the table counts. An
// unmatched release is the backend's to count (Backend.Underflows).
func (t *Table) release(b *l4.Backend) {
	if t.counted {
		b.Release()
	}
}

// exportEntry copies e for a caller.
func exportEntry(e *entry) Entry {
	return Entry{Backend: e.backend, Owner: e.owner, State: e.state}
}

// Stats returns a snapshot of the table's counters.
func (t *Table) Stats() Stats {
	var st Stats
	for i := range t.shards {
		s := &t.shards[i]
		st.Hits += s.hits.Load()
		st.Misses += s.misses.Load()
		st.Inserts += s.inserts.Load()
		st.Duplicates += s.dups.Load()
		st.Rebinds += s.rebinds.Load()
		st.Deleted += s.ends[ReasonDeleted].Load()
		st.Expired += s.ends[ReasonExpired].Load()
		st.Evicted += s.ends[ReasonEvicted].Load()
		st.Closed += s.ends[ReasonClosed].Load()
	}
	st.Lookups = st.Hits + st.Misses
	st.Entries = t.Len()
	return st
}
