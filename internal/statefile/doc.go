// Package statefile keeps what a restart or an upgrade of l4lb must not
// forget in [global] state_file (HAProxy's server-state-file): the
// operators' run-time backend changes, drains and disables, and which
// backends health took down.
//
// The file is JSON with a header (format, schema, host) and a SHA-256 of
// its state; it is written whole to a temporary file beside it, synced
// and renamed over it, so a crash leaves the old file or the new one,
// never half of one. Read refuses a file that does not parse, whose sum
// does not match, or that another host or another schema wrote: the
// caller logs why and starts from the config file alone. Nothing here
// stops l4lb from starting.
package statefile
