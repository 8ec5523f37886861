// Package balance holds l4lb's balancing algorithms: smooth weighted round
// robin, least connections, power of two choices, least time, a consistent
// hash ring, Maglev and weighted random.
//
// Algorithms are pure: they take a member list (the eligible backends and
// their weights) and return a Picker that is immutable once built. A Pick
// never allocates, never takes a lock shared across goroutines and never
// scans for healthy backends; per-flow state it reads (live flows, RTT)
// lives in atomics on l4.Backend. No sockets, clocks or logging here.
package balance
