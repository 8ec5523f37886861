// The status of BFD sessions (a BGP peer's bfd table).

package plane

import "time"

// BFDStatus is one BFD session with a BGP peer.
type BFDStatus struct {
	State       string `json:"state"`        // admindown, down, init, up
	RemoteState string `json:"remote_state"` // as the peer last said
	// Diag is why the session last left up ("detection-time-expired",
	// "neighbor-down", ...; "none").
	Diag        string        `json:"diag"`
	Interval    time.Duration `json:"interval_ns"` // configured
	Multiplier  int           `json:"multiplier"`
	TxInterval  time.Duration `json:"tx_interval_ns"` // the periodic interval now, before jitter
	DetectTime  time.Duration `json:"detect_time_ns"` // 0 while the peer is not heard
	LocalDiscr  uint32        `json:"local_discr"`
	RemoteDiscr uint32        `json:"remote_discr"`
	Since       time.Time     `json:"since,omitzero"` // the last state change
	Sent        uint64        `json:"sent"`
	Received    uint64        `json:"received"`
	Dropped     uint64        `json:"dropped"`     // received and discarded by the session
	SendErrors  uint64        `json:"send_errors"` // sends that failed (no route, ICMP unreachable)
	Ups         uint64        `json:"ups"`
	Downs       uint64        `json:"downs"`      // from up to down
	BGPResets   uint64        `json:"bgp_resets"` // BGP sessions reset because BFD failed
	// MaxTxGap is the longest gap between two packets sent while up: if
	// it passed the router's detection time, a flap was this process not
	// being scheduled, not the path.
	MaxTxGap time.Duration `json:"max_tx_gap_ns"`
}

// BFDDrops counts BFD packets that reached no session.
type BFDDrops struct {
	Malformed uint64 `json:"malformed"`  // refused by the checks of RFC 5880 section 6.8.6
	TTL       uint64 `json:"ttl"`        // TTL or hop limit not 255 (RFC 5881 GTSM)
	NoSession uint64 `json:"no_session"` // unknown discriminator or source
}
