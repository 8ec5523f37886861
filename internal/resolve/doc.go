// Package resolve looks up the DNS names of named backends and watches
// them: A and AAAA records for name:port, SRV records (and their targets'
// addresses) for a service, each answer with its smallest TTL.
//
// A Watcher looks one name up again when its answer's TTL runs out,
// clamped to [Bounds.Min, Bounds.Max], and backs off after a failure. It
// reports every result; what to keep (the last good answer when one
// fails) is the caller's rule. One goroutine per watched name, each lookup
// bounded in time: a name that never answers costs one query at a time.
//
// It asks the configured servers itself (github.com/miekg/dns) rather than
// through net.Resolver, which hides TTLs. Host names are first looked up
// in the hosts file, in the order nsswitch.conf gives (files, then dns),
// as the system resolver does; the file is read again when it changes.
// It imports nothing of l4lb and does not log.
package resolve
