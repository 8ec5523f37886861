// Flow tables balancers share: the ability flow sync reads and writes.

package plane

import (
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// SyncedFlow is one pinned flow as flow sync carries it between
// balancers: by addresses, which mean the same on every balancer, never
// by the backend indexes each one assigns.
type SyncedFlow struct {
	Flow    l4.Flow        // client -> VIP
	Backend netip.AddrPort // the backend it is pinned to
	Age     time.Duration  // since the flow's last packet (as the table knows it)
	Closing bool           // a FIN was seen
	// Pin: a proxy VIP's affinity pin, not a flow: Flow.Src's port is 0
	// (the pin is the client address's), Age is its idle time.
	Pin bool
}

// InstallResult is what became of a peer's flow.
type InstallResult uint8

// The results.
const (
	Installed             InstallResult = iota
	InstallKnown                        // the table has the flow already: the local entry wins
	InstallForeignVIP                   // no xdp VIP here has the flow's address, port and protocol (or it is a NAT VIP); for a pin, no proxy VIP with affinity_timeout
	InstallUnknownBackend               // the VIP here has no such backend (or it is retired)
	InstallFailed                       // the map refused the write
)

// FlowTable is a data plane's table of pinned flows that balancers can
// share (the XDP program's conntrack).
type FlowTable interface {
	// PinnedFlows calls fn, until it returns false, for every flow
	// pinned here (not installed from a peer) whose last packet is
	// within the last `within`; it returns how many entries of the
	// table came from peers.
	PinnedFlows(within time.Duration, fn func(SyncedFlow) bool) (fromPeers int, err error)
	// InstallFlows writes a peer's flows into the table, each unless the
	// table has it, with last-seen now - Age; results[i] says what
	// became of flows[i] (len(results) >= len(flows)).
	InstallFlows(flows []SyncedFlow, results []InstallResult)
}

// PinTable is a plane whose client pins flow sync shares (a proxy TCP
// VIP's affinity pins).
type PinTable interface {
	// SyncedPins calls fn, until it returns false, for every pin made
	// here (not installed from a peer) used within the last `within`; it
	// returns how many pins came from peers.
	SyncedPins(within time.Duration, fn func(SyncedFlow) bool) (fromPeers int)
	// InstallPin installs a peer's pin f (f.Pin) unless the client has
	// one here; the backend must be one this VIP can pick now.
	InstallPin(f SyncedFlow) InstallResult
}
