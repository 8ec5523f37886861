// Package sockfwd forwards established TCP connections inside the kernel:
// a SOCKHASH holds both sockets of a proxied connection and an sk_skb
// stream-verdict program (fwd.c, compiled by bpf2go into the committed
// fwd_bpfel.{go,o}) redirects every skb that arrives on one to the send
// path of the other, counting bytes and noting the time per socket.
//
// The proxy (l4/proxy) decides which connections go in and keeps their
// life: it passes FINs on, propagates resets, times out idle connections
// and reads the counts. This package only loads the program, adds and
// removes socket pairs and reads each socket's direction.
//
// # Hazards
//
//   - Bytes already in a socket's receive queue when it enters the map are
//     not seen until the next skb arrives (the verdict runs from
//     data_ready); Add kicks each socket (SO_RCVLOWAT, which runs
//     data_ready) so that they are forwarded at once, in order.
//   - A redirected skb waits in the peer's psock queue while the peer's
//     send buffer is full; that queue has no limit of its own, and the
//     source's receive window reopens as soon as the program took the
//     skb. A peer that stops reading lets the other side fill kernel
//     memory up to what it sends (docs/design.md, "Kernel forwarding").
//   - Removing a socket from the map drops what waits in its psock queue:
//     Remove is for connections being reset or already drained.
//   - The FIN is not an skb the program sees.
//
// # Non-goals
//
// No parsing of the bytes (there is no stream parser), no sk_msg program,
// no UDP.
package sockfwd
