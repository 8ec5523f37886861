// The answers of the run-time verbs: an override (drain, disable, enable)
// and a rebalance.

package plane

import "time"

// OverrideResult says what setting an override did.
type OverrideResult struct {
	VIP      string `json:"vip"`
	Backend  string `json:"backend"` // the backend's identity: its name, or its address
	Address  string `json:"address"`
	Override string `json:"override"`
	Previous string `json:"previous"`
	By       string `json:"by"`
	// LiveFlows counts the backend's established flows when the override
	// was set: a drain lets them finish.
	LiveFlows int64 `json:"live_flows"`
	// Reset counts the flows a disable ended (TCP connections, xdp
	// conntrack entries); UDP sessions move on their next datagram.
	Reset int `json:"reset"`
	// Forced is the capacity guard's refusal that force overrode (the
	// backends left cannot take its live flows, or there are none).
	Forced string `json:"forced,omitempty"`
	// Unchanged: the backend was already so (an enable of a backend with
	// no override, a drain of a drained one); nothing was set or logged,
	// and By is who set the override in force.
	Unchanged bool `json:"unchanged,omitempty"`
}

// Rebalance states.
const (
	RebalanceNone    = "none"    // none ran since the VIP started
	RebalanceRunning = "running" // closing connections
	RebalanceDone    = "done"    // every backend within the tolerance
	RebalanceStopped = "stopped" // ended before that: Reason says why
)

// RebalanceStatus is a rebalance's plan and progress: the admin API's
// answer to POST, GET and DELETE /vips/{vip}/rebalance.
type RebalanceStatus struct {
	VIP   string `json:"vip"`
	State string `json:"state"` // none | running | done | stopped
	// Reason says why it ended, or why there was nothing to do.
	Reason    string    `json:"reason,omitempty"`
	Rate      int       `json:"rate,omitempty"`  // connections closed per second
	Close     string    `json:"close,omitempty"` // fin | reset
	Tolerance float64   `json:"tolerance"`
	By        string    `json:"by,omitempty"`
	Started   time.Time `json:"started,omitzero"`
	Ended     time.Time `json:"ended,omitzero"`
	// Planned is how many closes its rounds planned (the first round's
	// plan when it started; a round that left the backends unbalanced,
	// round robin's reconnections spread by weight, adds the next round's);
	// Closed how many connections it closed so far; ToClose how many more
	// the current round will close (with none running, how many a
	// rebalance would plan now). Each close is expected to move one client.
	Planned int `json:"planned"`
	Closed  int `json:"closed"`
	ToClose int `json:"to_close"`
	// Rounds counts the plans so far.
	Rounds   int                `json:"rounds,omitempty"`
	Backends []RebalanceBackend `json:"backends"`
}

// RebalanceBackend is one backend in a rebalance.
type RebalanceBackend struct {
	ID string `json:"id"`
	// Eligible backends take new flows and have a target; the others
	// (down, drained, disabled, weight 0) are left alone.
	Eligible bool    `json:"eligible"`
	Weight   uint32  `json:"weight"` // the weight new flows see (slow start included)
	Live     int64   `json:"live"`
	Target   float64 `json:"target"` // live flows of eligible backends x its weight share
	ToClose  int     `json:"to_close"`
	Closed   int     `json:"closed"` // by this rebalance
}

// Running reports whether the rebalance is still closing connections.
func (s RebalanceStatus) Running() bool { return s.State == RebalanceRunning }
