// Package appframe follows the message framing of a server's stream in
// an application protocol (PostgreSQL, MySQL/MariaDB, WebSocket) as its
// bytes pass through the proxy, to say where a connection could be
// closed without cutting a transaction or a frame in two: after a
// PostgreSQL ReadyForQuery with status idle, after a MySQL OK or EOF
// that ends a response outside a transaction, between two WebSocket
// frames. It reads lengths, message types and the few status bytes
// that say so; never a query, a row or a payload, and it never answers
// or changes a byte. A Tracker is a few integers and a small header
// buffer: feeding it allocates nothing. It imports nothing of l4lb.
//
// Hazards: the bytes come from anyone. Every length is checked, and a
// stream that makes no sense (a length no server sends, an HTTP answer
// other than 101, TLS) leaves the tracker lost for good: it then never
// reports a boundary, and the caller falls back. Non-goals: the client's
// stream (the caller compares byte counts instead), the MySQL compressed
// protocol, anything after TLS.
package appframe
