// Package report writes what l4lb's client verbs print for a person from
// the running l4lb's answers: the status table, the explain steps, a
// rebalance's plan, progress and end (following it for --wait), and the
// results of drain, disable, enable, reload and upgrade. It reads the
// admin API's answers and the status wire types; it never talks to the
// data planes and holds no state. --json output is the API's own bytes and
// does not pass through it.
package report
