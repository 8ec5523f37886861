// Package proxyhdr writes the PROXY protocol header (v1 text, v2 binary)
// that tells a backend who the client is. The proxy sends it before a
// client's bytes, and the health checks before a probe's (HAProxy's
// check-send-proxy), so a backend that requires the header accepts both.
// It imports nothing of l4lb and allocates nothing when the buffer has
// room.
package proxyhdr
