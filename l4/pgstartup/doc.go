// Package pgstartup reads the first packet a PostgreSQL client sends
// (protocol 3): a StartupMessage's database and user parameters, or which
// request it is instead (SSLRequest, GSSENCRequest, CancelRequest), from
// the bytes that have arrived so far, without consuming them: the proxy
// peeks the client's bytes, asks Parse, and either waits for more, picks
// a route, or gives up. Parse never allocates: the values are sub-slices
// of the input. It imports nothing of l4lb.
//
// Hazards: the bytes come from anyone. Every length is checked against
// what is there; a packet longer than MaxStartup (PostgreSQL's own cap)
// is refused as soon as its length word arrives, so a client cannot make
// the proxy wait for, or hold, more than that. Non-goals: any message
// after the first (authentication, queries), other parameters than
// database and user (options, replication and the rest pass to the
// server untouched), protocol 2.
package pgstartup
