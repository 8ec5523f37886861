// The status wire format: the process, its pipes, loops, XDP program and
// BGP speaker (`l4lb status`, GET /status).

package plane

import (
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Status is the runtime's state at one moment.
type Status struct {
	Process ProcessStatus `json:"process"` // filled by the process that serves the status
	Config  string        `json:"config"`
	Pipes   PipeStatus    `json:"pipes"`
	// Kernel is the proxy's kernel forwarding (kernel_forwarding).
	Kernel KernelStatus `json:"kernel_forwarding"`
	// Workers holds, per event loop, the TCP connections and UDP sessions
	// it owns.
	Workers []WorkerStatus `json:"workers"`
	// BusyPoll is how long an idle event loop polls before it sleeps
	// ([global] busy_poll; 0 = it does not).
	BusyPoll time.Duration `json:"busy_poll_ns"`
	XDP      *XDPStatus    `json:"xdp,omitempty"` // when the XDP program runs
	// BGP is the speaker's sessions and routes (filled by the process
	// that runs the speaker; nil: no [bgp]).
	BGP *BGPStatus `json:"bgp,omitempty"`
	// FlowSync is flow sync's counters (nil: no [flow_sync]).
	FlowSync *FlowSyncStatus `json:"flow_sync,omitempty"`
	// Stopping: l4lb is shutting down; its VIPs accept nothing and are
	// listed as draining until their connections end.
	Stopping bool        `json:"stopping,omitempty"`
	VIPs     []VIPStatus `json:"vips"`
	// BackendChanges are the operators' run-time changes to backends
	// (`l4lb backend add|set|remove`) laid over the file, in order; a
	// reload keeps each while the file leaves its backend as it was.
	BackendChanges []l4.BackendChange `json:"backend_changes,omitempty"`
	// StateFile is [global] state_file's last write and what the start
	// restored from it (absent: no state_file).
	StateFile *StateFileStatus `json:"state_file,omitempty"`
}

// BGPStatus is what l4lb announces and to whom.
type BGPStatus struct {
	ASN       uint32          `json:"asn"`
	RouterID  string          `json:"router_id"`
	Peers     []BGPPeerStatus `json:"peers"`
	Announced []string        `json:"announced"` // host routes, "198.18.0.10/32"
	// Withdrawn: the shutdown withdrew every route; nothing is announced
	// again.
	Withdrawn bool `json:"withdrawn,omitempty"`
	// BFDDropped counts BFD packets that reached no session (nil: no
	// peer has BFD).
	BFDDropped *BFDDrops `json:"bfd_dropped,omitempty"`
}

// BGPPeerStatus is one BGP session.
type BGPPeerStatus struct {
	Address       string     `json:"address"`
	ASN           uint32     `json:"asn"`
	State         string     `json:"state"` // idle, connect, active, opensent, openconfirm, established
	Up            bool       `json:"up"`
	Since         time.Time  `json:"since,omitzero"` // when the session came up
	UptimeSeconds float64    `json:"uptime_seconds,omitempty"`
	PrefixesSent  int        `json:"prefixes_sent"`
	BFD           *BFDStatus `json:"bfd,omitempty"` // nil: the peer has no BFD
}

// ProcessStatus describes the l4lb process: its build, age and last reload.
type ProcessStatus struct {
	Version       string        `json:"version"`
	Commit        string        `json:"commit"`
	GoVersion     string        `json:"go_version"`
	BuildDate     string        `json:"build_date"`
	PID           int           `json:"pid"`
	Started       time.Time     `json:"started"`
	UptimeSeconds float64       `json:"uptime_seconds"`
	LastReload    *ReloadStatus `json:"last_reload,omitempty"` // nil: no reload since start
	// Capabilities the process holds (nil: not known).
	Capabilities *CapabilityStatus `json:"capabilities,omitempty"`
}

// CapabilityStatus is the daemon's Linux capabilities, by name
// ("cap_net_admin"); Dropped says whether drop_capabilities took effect.
type CapabilityStatus struct {
	Dropped   bool     `json:"dropped"`
	Effective []string `json:"effective"`
	Permitted []string `json:"permitted"`
	Bounding  []string `json:"bounding"`
}

// ReloadStatus is the outcome of one reload (SIGHUP).
type ReloadStatus struct {
	Time  time.Time `json:"time"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"` // why the file was refused; the running config stayed
}

// WorkerStatus describes one event loop.
type WorkerStatus struct {
	Conns       int64 `json:"conns"`        // TCP connections
	UDPSessions int64 `json:"udp_sessions"` // UDP sessions
}

// PipeStatus describes the shared splice pipe pool.
type PipeStatus struct {
	Open int64 `json:"open"` // pipes with open descriptors, lent or pooled
	Lent int64 `json:"lent"` // pipes moving a chunk right now
	Max  int   `json:"max"`  // cap on open pipes; 0 = none
}

// KernelStatus is the proxy's kernel forwarding: the program's state and
// the TCP connections on each path.
type KernelStatus struct {
	State     string `json:"state"`      // loaded | not loaded (no connection asked yet) | unavailable: why
	Conns     int64  `json:"conns"`      // connections forwarded in the kernel now
	UserConns int64  `json:"user_conns"` // connections (and connects) in l4lb's loops now: splice and copy
	Total     uint64 `json:"total"`      // connections ever moved into the kernel
	Failed    uint64 `json:"failed"`     // connections that asked and stayed in user space: the map refused them
}

// XDPStatus describes the XDP program.
type XDPStatus struct {
	Interface string `json:"interface"`
	Attach    string `json:"attach"`             // driver | generic
	PinPath   string `json:"pin_path,omitempty"` // maps and link pinned here: a restart adopts them
	LiveFlows int    `json:"live_flows"`         // flows in the conntrack seen lately, all VIPs
	// Counters are the program's global counters that are not zero:
	// packets passed to the kernel and dropped, by reason; flow table events.
	Counters map[string]uint64 `json:"counters"`
	// Interfaces lists, when [xdp] names several, each one with the mode
	// the kernel runs the program in there (Interface is the first).
	Interfaces []XDPInterface `json:"interfaces,omitempty"`
}

// XDPInterface is one interface the XDP program runs on.
type XDPInterface struct {
	Name   string `json:"name"`
	Attach string `json:"attach"` // driver | generic, as the kernel reports it
}
