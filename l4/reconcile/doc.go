// Package reconcile is l4lb's control loop: it turns a config.Config into
// running VIPs, diffs every reload against what runs, and keeps each VIP's
// balancer snapshot in step with its backends' weights and health.
//
// Apply is all or nothing for the part that can fail (opening new
// listeners): if a new VIP cannot listen, nothing changes. VIPs are keyed by
// listen address and protocol, so an unchanged VIP keeps its socket and its
// connections across reloads; backends are keyed by their identity, so
// live-flow counts survive too. An upgrade (upgrade.go) carries sockets,
// connections, sessions and backend state over to the next process by the
// same keys.
package reconcile
