// Package flowsync shares pinned flows between l4lb balancers: each sends
// the flows its XDP flow table pinned, and the affinity pins of its proxy
// TCP VIPs, to its peers, and installs theirs,
// so that a flow keeps its backend when the router moves it to another
// balancer, even after the backend sets changed during its life (Maglev
// alone then sends about 1/N of the moved flows elsewhere).
//
// The protocol (wire.go) is a UDP datagram of a fixed header, up to
// MaxEntries flows of 64 bytes, and an HMAC-SHA256 of both under the
// shared key. A datagram that fails the HMAC, is of another version, or
// repeats a sequence number of its sender (or is more than MaxSkew away
// from this balancer's clock, so that a replay cannot outlive a restart)
// is dropped and counted. Flows go by addresses, never by the backend
// indexes each balancer assigns.
//
// Bounded: a round sends at most max_rate x interval flows, at most
// max_rate flows a second are installed, and the table holds at most
// max_entries flows from peers. Installed flows age and leave the table
// as local ones do (the XDP program's LRU).
//
// Non-goals: proxy-mode connections (they end in their balancer's
// sockets and cannot move; only their client pins are shared), encryption (the flows' addresses travel in
// clear), flows that saw no packet since the last round (a peer that
// restarts gets the active ones only).
package flowsync
