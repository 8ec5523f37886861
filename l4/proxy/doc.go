// Package proxy is l4lb's user-space data plane: TCP VIPs proxied through
// kernel pipes with splice(2), UDP VIPs forwarded by session, and the
// listeners both use.
//
// Everything runs on event loops (evloop.go), one per core by default,
// each a locked OS thread with its own epoll set that owns its
// connections end to end. A TCP connection is a small struct in its loop,
// both sockets registered once, edge-triggered; small chunks move by read
// and write through the loop's buffer, bulk by splice through a pooled
// pipe. An idle connection holds its two sockets and a few hundred bytes,
// no pipe and no goroutine. A UDP VIP has one socket per loop (a
// SO_REUSEPORT group, so a flow stays on one loop), read and answered in
// recvmmsg/sendmmsg batches.
//
// An upgrade hands all of it to the next process (inherit.go, handoff.go,
// handoff_udp.go): listening sockets are duplicated and accepting pauses
// while both processes hold them; an established connection is frozen,
// flushed and detached from its loop, then adopted into the other
// process's loops; a UDP session's backend socket moves with its entry.
// That code runs only during an upgrade.
//
// The package knows nothing of TOML or health checks: a service is given
// immutable Settings and a snapshot.Store to pick from, and reports connect
// outcomes through an Observer. The control loop drives it through the
// l4/plane contract: TCPPlane and UDPPlane (plane_*.go) wrap a service
// each, with what they share across VIPs in Planes.
package proxy
