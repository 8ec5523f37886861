// Package names keeps the DNS names of a config's named backends looked
// up (one internal/resolve watcher per name, re-asked by its TTL within
// resolve_min and resolve_max) and expands each VIP's named backends into
// one backend per address of the name's last good answer. A failed or
// empty lookup keeps the last good answer; a name that never resolved
// leaves its backends absent, and `l4lb check` says so (Check).
//
// The control loop (l4/reconcile) runs it through its Names interface: it
// expands every VIP it plans, and plans a VIP again when one of its names
// answers something new. This package changes nothing that runs.
package names
