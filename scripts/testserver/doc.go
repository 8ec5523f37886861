// Command testserver is the small backend that `make demo` and the bench
// scripts run behind l4lb: an HTTP server that names itself in every reply
// and counts what it served, plus an HTTPS port (a self-signed
// certificate made at start; the reply also names the TLS server name the
// client asked for), a TCP echo, a UDP echo and a WebSocket echo port
// (which names itself in the X-Backend header of its 101). With -get it
// is instead a one-shot HTTPS client (the demo's, which needs no curl).
package main
