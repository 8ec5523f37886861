package admin

// The wire types of the API, shared by the daemon and the command line.

// ErrorBody is every error's answer.
type ErrorBody struct {
	Error string `json:"error"`
	// Problems lists a refused config's problems, one per line as
	// `l4lb check` prints them (POST /reload answered 422).
	Problems []string `json:"problems,omitempty"`
}

// ReloadResult is POST /reload's answer.
type ReloadResult struct {
	OK   bool `json:"ok"`
	VIPs int  `json:"vips,omitempty"`
	// Error and Problems say why a reload was refused; the running config
	// stays.
	Error    string   `json:"error,omitempty"`
	Problems []string `json:"problems,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// RestartOnly lists the changed keys a reload does not apply.
	RestartOnly []string `json:"restart_only,omitempty"`
}

// RebalanceRequest is the optional body of POST /vips/{vip}/rebalance.
type RebalanceRequest struct {
	// Rate is how many connections to close per second, 1..10000; 0 (or
	// absent) = the VIP's rebalance_rate.
	Rate int `json:"rate,omitempty"`
	// Reset ends the connections with an RST to both sides instead of a
	// FIN (clients learn at once, even those that are not reading).
	Reset bool `json:"reset,omitempty"`
	// Operator: as in OverrideRequest.
	Operator string `json:"operator,omitempty"`
}

// OverrideRequest is the optional body of a drain, disable or enable.
type OverrideRequest struct {
	// Reason is the operator's note, shown in status ("kernel upgrade").
	Reason string `json:"reason,omitempty"`
	// Operator is who ran the command when the client knows better than
	// the socket's peer (SUDO_USER); informational, the peer's uid is
	// always recorded too.
	Operator string `json:"operator,omitempty"`
	// Force sets a drain or disable that the capacity guard refuses (409):
	// one that leaves the VIP no eligible backend, or the backends left
	// too little room for its live flows.
	Force bool `json:"force,omitempty"`
}

// UpgradeRequest is the optional body of POST /upgrade.
type UpgradeRequest struct {
	// Binary is the new l4lb to start (an absolute path); empty: the
	// binary the running l4lb was started from, read from disk again.
	Binary string `json:"binary,omitempty"`
	// Timeout bounds the new process's start, until it is ready (a Go
	// duration such as "2m"); empty: one minute.
	Timeout string `json:"timeout,omitempty"`
}

// UpgradeResult is POST /upgrade's answer.
type UpgradeResult struct {
	OK bool `json:"ok"`
	// PID is the new process's (on failure: the one that failed, if it ran).
	PID    int    `json:"pid,omitempty"`
	OldPID int    `json:"old_pid,omitempty"`
	Binary string `json:"binary,omitempty"`
	// Error says why the upgrade failed; this process keeps serving,
	// unless Stopping: a stop asked of it cancelled the upgrade.
	Error    string   `json:"error,omitempty"`
	Stopping bool     `json:"stopping,omitempty"`
	Problems []string `json:"problems,omitempty"`
	// Listeners are the VIP sockets handed over; Connections and Sessions
	// the established TCP connections and UDP sessions the new process
	// adopted; Kept those that stay in this one to drain (they could not
	// be flushed in time, or the new config has no place for them).
	Listeners   int `json:"listeners"`
	Connections int `json:"connections"`
	// Flushed: of the connections handed over, those whose bytes held in
	// this process (pipes, buffers) were written out first; Piped: those
	// whose bytes in flight went with them, in their pipes.
	Flushed  int `json:"flushed"`
	Piped    int `json:"piped"`
	Sessions int `json:"sessions"`
	Kept     int `json:"kept"`
	// Seconds is how long the upgrade took, from the start of the new
	// binary; HandoverSeconds the part that moved established flows.
	Seconds         float64 `json:"seconds"`
	HandoverSeconds float64 `json:"handover_seconds"`
}
