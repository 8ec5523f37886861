// Package sni reads the server name (SNI) from a TLS ClientHello that
// has arrived so far, without consuming it: the proxy peeks the client's
// bytes, asks Parse, and either waits for more, picks a route from the
// name, or gives up. Parse never allocates: the name is a sub-slice of
// the input (or of the caller's scratch buffer when the ClientHello spans
// several TLS records). It imports nothing of l4lb.
//
// Hazards: the bytes come from anyone. Every length is checked against
// what is there; a ClientHello longer than MaxHello is refused rather
// than waited for, so a client cannot make the proxy hold more than a
// bounded peek. Non-goals: ECH (the outer SNI is what is read), SSLv2
// hellos (refused as not TLS), any validation beyond what routing needs.
package sni
