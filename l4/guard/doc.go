// Package guard decides whether a client may open a new flow: access lists
// by network (ACL) and limits per client address (Clients). It knows
// nothing of sockets, configuration files or time sources: the data planes
// ask it with an address and a reading of their monotonic clock, so a
// wall-clock jump changes nothing.
//
// Both are on the accept path of every connection and the first datagram
// of every UDP session: an ACL is immutable (swapped whole on reload) and
// answers without allocating; Clients is sharded by address, so loops on
// different cores rarely meet on a lock, and reuses its entries.
package guard
