// Package proxy is l4lb's user-space data plane: TCP VIPs proxied with
// splice(2) through kernel pipes, UDP VIPs forwarded by session, and the
// listeners both use.
//
// Bytes never pass through a user-space buffer: each direction of a proxied
// TCP connection waits for readability on Go's netpoller (syscall.RawConn),
// borrows a pipe from a pool, splices what the socket holds into it, splices
// the pipe out to the other socket and returns the pipe. An idle connection
// therefore holds its two sockets and two parked goroutines, no pipe.
//
// The package knows nothing of TOML or health checks: a service is given
// immutable Settings and a snapshot.Store to pick from, and reports connect
// outcomes through an Observer.
package proxy
