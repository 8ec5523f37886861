// Package wsecho is a minimal WebSocket (RFC 6455) echo server and client
// for tests and benchmarks that hold thousands of connections: an HTTP/1.1
// Upgrade handshake, then single-frame messages (payloads under 64 KiB),
// the client masking, the server echoing each data frame back unmasked.
// No extensions, fragmentation or subprotocols. It imports no testing
// package, so scripts/testserver and the bench's load generator use it too.
//
// The server names itself in an X-Backend header of its 101 answer, so a
// client learns which backend a balancer sent it to.
package wsecho
