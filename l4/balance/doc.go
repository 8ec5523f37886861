// Package balance holds l4lb's balancing algorithms: smooth weighted round
// robin, least connections, power of two choices, least time, a consistent
// hash ring, Maglev and weighted random.
//
// Algorithms are pure: they take a member list (the eligible backends and
// their weights) and return a Picker that is immutable once built. A Pick
// never allocates, never takes a lock and never scans for healthy backends;
// per-flow state it reads (live flows, RTT) lives in atomics on l4.Backend,
// and a Pick counts the new flow there (Acquire) before it returns, so that
// concurrent picks see each other. No sockets, clocks or logging here.
//
// Costs: round_robin, p2c, random, source_hash and maglev are O(1) (the
// ring's lookup O(log n) at worst); least_conn and least_time scan every
// member by nature. Retries (a non-empty Tried) may fall back to an O(n)
// scan once the algorithm's own sequence is exhausted.
//
// The hashing algorithms (source_hash, maglev) use a fixed hash with no
// run-time seed: every l4lb instance with the same members sends a flow to
// the same backend, and MaglevTable, which the XDP control plane writes into
// its maps, is byte-identical everywhere. Their optional load bound
// (Options.BalanceFactor) reads the VIP-wide live-flow counter that the
// members' backends share (l4.Backend.VIPFlows).
//
// Non-goals: health (callers pass only eligible members), slow start (the
// caller ramps weights and rebuilds), and stickiness beyond hashing
// (conntrack pins established flows).
package balance
