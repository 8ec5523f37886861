// Package announce is l4lb's BGP wiring: it keeps the speaker of
// internal/bgp announcing the host route of every VIP address the runtime
// serves (one with an eligible backend), applies a reloaded [bgp] table
// (unchanged peers keep their sessions), withdraws every route first at a
// shutdown, and reports the sessions for l4lb status. internal/bgp knows
// no config and no runtime; this package is the one that joins them.
package announce
