// Package conntrack is l4lb's user-space flow table: it pins each flow
// (protocol and 5-tuple) to the backend a balancer picked, owns that flow's
// live-flow count on the backend, and ends idle flows.
//
// # Shape
//
// A Table is split into a power-of-two number of shards, chosen by the top
// bits of a seeded hash of the Key. Each shard is an RWMutex over an
// open-addressing index (one uint64 per slot: hash tag and slab slot) and a
// slab of fixed 72-byte entries allocated in chunks. At a million flows it
// takes 91 bytes per entry where a Go map[Key]*entry per shard takes 149 and
// a map[Key]entry 167, and inserts do not allocate (docs/bench-conntrack.md).
// The index holds no pointers, so the GC never scans it.
//
// Time is a coarse clock: the sweeper stores "ticks since the table was
// made" (Options.Tick, default one second) into an atomic; lookups read it
// and store an entry's last-seen tick only when it changed. Nothing on the
// lookup path calls time.Now.
//
// The sweeper (Start, or Sweep called by hand) scans at most
// Options.SweepBatch slab slots per shard per tick, resuming where it
// stopped, and ends entries idle longer than their protocol's timeout. When
// a shard is full, Insert evicts the oldest of a random sample of entries
// (approximate LRU, the Redis method: no list links to keep, lookups never
// take the write lock).
//
// # Counts
//
// Insert takes ownership of one live-flow count on its backend (the count a
// balancer's Pick acquired), whether or not it inserts: a duplicate or an
// insert into a closed table releases it at once. The table releases the
// count exactly once when the entry ends (delete, expiry, eviction, close);
// Rebind releases the old backend's count and owns the new one's. A table
// made with Options.Uncounted owns no counts at all (Affinity uses one).
//
// # Hazards
//
//   - OnStart and OnEnd run outside the shard locks, after the change, so
//     they may call back into the table; but events for one key may reorder
//     across entries (a re-insert's OnStart can run before the previous
//     entry's OnEnd). Count by backend or owner, not by key. Hooks must not
//     call Sweep or Close: expiries run them on the sweeper.
//   - An Entry is a copy. Its Owner may be ended (OnEnd) while a caller that
//     looked it up still uses it; owners must tolerate use after close.
//   - Expiry and eviction release the count even if the data plane still
//     holds the connection: a data plane with long quiet flows must Lookup
//     them now and then (or set TCPIdle above its own timeouts), and should
//     tear down the flow in OnEnd so that counts keep matching reality.
//   - Memory is a high-water mark: shards never shrink their slab or index
//     until Close (like Go maps). MaxEntries bounds it; SetMaxEntries
//     changes the bound later (the number of shards stays).
//   - The cap is per shard (MaxEntries/shards), so with skew a shard evicts
//     slightly before the table as a whole reaches MaxEntries.
//   - KeyOf canonicalises addresses (IPv4-mapped IPv6 becomes IPv4, zones
//     are dropped), so Key.Flow returns that canonical form.
//
// # Non-goals
//
// No packet parsing and no TCP state machine: the data plane says what state
// a flow is in (SetState). No sockets, no logging, no config: the runtime
// wires hooks to its logger and metrics. It does not mirror the XDP LRU map;
// the bpf package reads that itself.
package conntrack
