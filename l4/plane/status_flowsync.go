// The status of flow sync ([flow_sync]).

package plane

import "time"

// FlowSyncStatus is flow sync's settings and counters; flows counted one
// each, datagrams as said.
type FlowSyncStatus struct {
	Listen   string        `json:"listen"`
	Peers    []string      `json:"peers"`
	Interval time.Duration `json:"interval_ns"`

	Sent            uint64 `json:"sent"`              // flows sent (each to every peer)
	DatagramsSent   uint64 `json:"datagrams_sent"`    // datagrams sent, per peer
	SendErrors      uint64 `json:"send_errors"`       // datagrams a send refused
	SendRateLimited uint64 `json:"send_rate_limited"` // flows a round left out for max_rate

	Datagrams      uint64 `json:"datagrams"`       // datagrams received
	Installed      uint64 `json:"installed"`       // peers' flows written into the table
	Known          uint64 `json:"known"`           // peers' flows the table had already
	ForeignVIP     uint64 `json:"foreign_vip"`     // peers' flows for VIPs this balancer does not serve in xdp mode
	UnknownBackend uint64 `json:"unknown_backend"` // peers' flows to a backend the VIP here does not have
	InstallFailed  uint64 `json:"install_failed"`  // writes the table refused

	Malformed          uint64 `json:"malformed"`            // datagrams and flows that make no sense
	BadVersion         uint64 `json:"bad_version"`          // datagrams of another protocol version
	BadAuth            uint64 `json:"bad_auth"`             // datagrams whose HMAC does not match the key
	Replays            uint64 `json:"replays"`              // datagrams seen before, or too far from this clock
	InstallRateLimited uint64 `json:"install_rate_limited"` // peers' flows dropped for max_rate
	TableFull          uint64 `json:"table_full"`           // peers' flows dropped for max_entries
	FromPeers          int64  `json:"from_peers"`           // entries from peers in the table (as of the last round)
}
