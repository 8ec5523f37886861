// Package reconcile is l4lb's control loop: it turns a config.Config into
// running VIPs, diffs every reload against what runs, and keeps each VIP's
// balancer snapshot in step with its backends' weights and health.
//
// It drives every VIP's data plane through l4/plane's contract: the one
// place that looks at a VIP's mode (dataplane.go) opens the proxy or XDP
// plane with settings that mapping.go maps from the config, and what only
// some planes do (SNI routes, an upgrade's handoff) is asked through
// optional interfaces, never by the plane's concrete type. DNS names of
// named backends come from its Names (internal/names).
//
// Apply is all or nothing for the part that can fail (opening new
// listeners): if a new VIP cannot listen, nothing changes. VIPs are keyed by
// listen address and protocol, so an unchanged VIP keeps its socket and its
// connections across reloads; backends are keyed by their identity, so
// live-flow counts survive too. An upgrade (upgrade.go) carries sockets,
// connections, sessions and backend state over to the next process by the
// same keys.
package reconcile
