// Package bfd runs BFD sessions (RFC 5880, asynchronous mode, single hop
// over IPv4 and IPv6 as RFC 5881 puts it) with l4lb's BGP routers, so that
// a router drops a balancer's routes within a fraction of a second of the
// balancer going silent, where BGP alone waits for its hold time.
//
// A Server owns the receiving sockets (UDP 3784, every packet must arrive
// with TTL or hop limit 255: the GTSM check of RFC 5881 section 5) and
// one Session per peer, each with its own sending socket (source port
// 49152..65535, TTL 255). The timers and the receiving run on threads of
// their own (locked, nice -20, sleeping in the kernel), not on Go timers:
// a packet late by more than the router's detection time takes the
// session down there. A session's state machine (fsm.go) is pure and
// driven by packets and timers the session feeds it, so that it is tested
// against the RFC's tables without sockets; the codec (packet.go) is
// fuzzed.
//
// The server reports every state change to its OnChange callback; the BGP
// wiring (internal/announce) resets the BGP session of a peer whose BFD
// session went from Up to Down, except when the peer said AdminDown
// (RFC 5882 section 3.2: an administrative stop is not a failure).
//
// Non-goals: authentication (a packet with the A bit is discarded), demand
// mode, the echo function, multi-hop sessions.
package bfd
