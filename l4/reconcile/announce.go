// Which VIP addresses have something to serve: what a BGP speaker announces.

package reconcile

import (
	"net/netip"
	"slices"
)

// servedSignal wakes the one reader of Runtime.ServingChanged when a VIP's
// eligible set may have changed. A poke never blocks (it runs under a
// VIP's lock, on probe goroutines); pokes coalesce.
type servedSignal struct{ ch chan struct{} }

func newServedSignal() *servedSignal { return &servedSignal{ch: make(chan struct{}, 1)} }

func (s *servedSignal) poke() {
	if s == nil {
		return
	}
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// ServingChanged receives a value after any change that may change
// Serving's answer: a snapshot published (health, drain, weights, a
// reload) or a VIP started or removed. It has one reader.
func (r *Runtime) ServingChanged() <-chan struct{} { return r.served.ch }

// Serving lists, sorted and without repeats, the addresses of the running
// VIPs that announce (config announce, default true) and have at least
// one eligible backend (an SNI route's backends
// count for its VIP): the host routes a BGP speaker announces. A VIP a
// reload removed, or one that stopped accepting on shutdown, is not
// listed, nor is a VIP on a wildcard address (0.0.0.0, ::). It reads the lock-free index and the snapshots, so it may run
// at any time.
func (r *Runtime) Serving() []netip.Addr {
	var out []netip.Addr
	for _, v := range *r.index.Load() {
		if v.stopped.Load() || !v.cfg().Announce || v.store.Load().Len() == 0 {
			continue
		}
		if v.key.Addr.Addr().IsUnspecified() {
			continue // a wildcard listener has no address to route: 0.0.0.0/32 must never be announced
		}
		out = append(out, v.key.Addr.Addr().Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
