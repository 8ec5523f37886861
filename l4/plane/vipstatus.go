// A VIP's part of status: its counters, backends, routes and names.

package plane

import (
	"time"

	"github.com/l4lb/l4lb/l4"
)

// VIPStatus describes one running VIP.
type VIPStatus struct {
	Name string `json:"name"`
	// Draining: a reload removed the VIP or changed its mode
	// (ModeChange), or l4lb is stopping; it accepts nothing and is listed
	// until its last connection ends or drain_timeout resets it.
	Draining     bool            `json:"draining,omitempty"`
	Listen       string          `json:"listen"`
	Protocol     string          `json:"protocol"`
	Algorithm    string          `json:"algorithm"`
	Eligible     int             `json:"eligible"`
	Active       int64           `json:"active"`
	Accepted     uint64          `json:"accepted"`
	NoBackend    uint64          `json:"no_backend"`
	ConnectFails uint64          `json:"connect_fails"`
	Backends     []BackendStatus `json:"backends"`
	TCP          *TCPStatus      `json:"tcp,omitempty"`
	UDP          *UDPStatus      `json:"udp,omitempty"`
	XDP          *XDPVIPStatus   `json:"xdp,omitempty"`
	// XDPGuard: a proxy VIP the XDP program guards (an [xdp] table, a
	// concrete listen address).
	XDPGuard *XDPGuardStatus `json:"xdp_guard,omitempty"`
	// ModeChange: this draining entry is the plane a reload's mode
	// change left; the VIP's entry of the same name serves new flows.
	ModeChange *ModeChangeStatus `json:"mode_change,omitempty"`
	// Rebalance is the running or last rebalance (l4lb rebalance), if any.
	Rebalance *RebalanceStatus `json:"rebalance,omitempty"`
	// SNI is the VIP's SNI routing, when it has [[vip.route]] tables
	// (its Backends are then the default route).
	SNI *SNIStatus `json:"sni,omitempty"`

	// ConnLogDropped counts log_connections lines dropped over log_connections_rate.
	ConnLogDropped uint64 `json:"conn_log_dropped,omitempty"`
	// Denied counts clients refused by allow/deny in user space (TCP
	// connections reset, UDP datagrams dropped); ClientLimited those
	// refused by a per-client limit. Proxy mode.
	Denied        uint64 `json:"denied,omitempty"`
	ClientLimited uint64 `json:"client_limited,omitempty"`
	// Serving is the set of backends new flows go to: "primaries",
	// "backups" (no primary is eligible), "panic" (health left none and
	// panic_mode sends new flows to backends down by health) or "none";
	// absent when the VIP has no backup backend, is not backup_mode
	// "sticky" and is not in panic.
	Serving string `json:"serving,omitempty"`
	// Failover counts panic mode, passive marks max_ejected overruled and
	// the backups' connections on_backup_recovered ended.
	Failover *FailoverStatus `json:"failover,omitempty"`
	// Names are the DNS names of the VIP's named backends: each one's
	// last good answer (its backends), its age, and the last error.
	Names []NameStatus `json:"names,omitempty"`
}

// ModeChangeStatus is the plane a reload that changed a VIP's mode
// left: it keeps the flows established before the reload (its entry's
// active) until they end, or until Until, when the rest are ended.
type ModeChangeStatus struct {
	From  string    `json:"from"` // the mode this plane runs: proxy or xdp
	To    string    `json:"to"`   // the VIP's mode now
	Since time.Time `json:"since"`
	Until time.Time `json:"until"` // since + drain_timeout
}

// BackendStatus describes one backend of a VIP.
type BackendStatus struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Index   uint32 `json:"index"` // l4.Backend.Index: its slot in the XDP backend map
	Weight  uint32 `json:"weight"`
	// EffectiveWeight is the weight new flows see now: 0 when not eligible,
	// below Weight while slow start ramps.
	EffectiveWeight uint32 `json:"effective_weight"`
	Health          string `json:"health"`
	// Trial: health type none, a passive mark expired and the backend is
	// eligible again ("unknown"); the next connect or reply decides.
	Trial bool `json:"trial,omitempty"`
	// Backup: a backup backend (new flows only while no primary is
	// eligible).
	Backup bool `json:"backup,omitempty"`
	// Removed: a reload took the backend out of the config; it is listed
	// (health "removed") until its last flow ends.
	Removed   bool   `json:"removed,omitempty"`
	Reason    string `json:"reason,omitempty"`
	LiveFlows int64  `json:"live_flows"`
	// MaxFlows is the backend's cap on live flows (max_conns for tcp,
	// max_sessions for udp); absent: none.
	MaxFlows int64 `json:"max_flows,omitempty"`
	// MaxConnRate is the backend's cap on new connections a second
	// (max_conn_rate); OverRate: it is over it now, skipped by new
	// connections until its next token. Absent: none.
	MaxConnRate int64 `json:"max_conn_rate,omitempty"`
	OverRate    bool  `json:"over_rate,omitempty"`
	// PeakFlows is the most live flows the backend held at once since it
	// started (a high-water mark, raised as flows open; xdp VIPs: at each
	// conntrack read): the capacity the drain and disable guard counts
	// on for a backend without MaxFlows; never below LiveFlows beside it
	// (status raises it to them). Absent: none yet.
	PeakFlows    int64  `json:"peak_flows,omitempty"`
	Flows        uint64 `json:"flows"`
	ConnectFails uint64 `json:"connect_fails"`
	// Unanswered: UDP sessions that ended by session_timeout without a
	// reply to any of their datagrams.
	Unanswered uint64        `json:"unanswered,omitempty"`
	BytesIn    uint64        `json:"bytes_in"`
	Packets    uint64        `json:"packets,omitempty"` // xdp VIPs: packets forwarded to it
	BytesOut   uint64        `json:"bytes_out"`
	RTT        time.Duration `json:"rtt_ns"`
	// Underflows counts releases without a matching acquire: always 0
	// unless there is a bug (logged when it happens).
	Underflows uint64 `json:"underflows,omitempty"`
	// Override is an operator's drain or disable (absent: none), with who
	// set it and when.
	Override      string    `json:"override,omitempty"`
	OverrideBy    string    `json:"override_by,omitempty"`
	OverrideSince time.Time `json:"override_since,omitzero"`
	// Degraded: the backend's connections stall (stall_timeout) and it
	// gets no new flow; the words say what the last look found ("3 of 4
	// connections: no reply for 5s (...)"), since when. DegradedKept: it
	// is the VIP's last eligible backend, so it still gets flows.
	Degraded      string    `json:"degraded,omitempty"`
	DegradedSince time.Time `json:"degraded_since,omitzero"`
	DegradedKept  bool      `json:"degraded_kept,omitempty"`
	// EjectKept: a passive mark took the backend down (health "down"),
	// but max_ejected keeps it in: that many of the VIP's backends are
	// passively ejected already.
	EjectKept bool      `json:"eject_kept,omitempty"`
	LastCheck string    `json:"last_check,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	ReplicaLag
	// Change is an operator's run-time change to the backend (`l4lb
	// backend add|set`), on top of the file: "added", "weight 7 (file
	// 100)", "max_conns 30 (file 0)"; with who made it and when.
	Change      string    `json:"change,omitempty"`
	ChangeBy    string    `json:"change_by,omitempty"`
	ChangeSince time.Time `json:"change_since,omitzero"`
	// Agent is the backend's agent check (agent_port); absent without one.
	Agent *AgentStatus `json:"agent,omitempty"`
}

// ReplicaLag is a replica's replication lag as its last check read it
// (postgres and mysql checks with role replica; absent otherwise, and
// when that check failed before reading it): seconds, or why it could
// not be told.
type ReplicaLag struct {
	Seconds *float64 `json:"replica_lag_seconds,omitempty"`
	Unknown string   `json:"replica_lag_unknown,omitempty"`
}

// Text is the lag as the text outputs show it: "lag 1.2s", "lag
// unknown (why)", or "" when none was read. (Not String: the types that
// embed ReplicaLag would print as it.)
func (l ReplicaLag) Text() string {
	switch {
	case l.Seconds != nil:
		return "lag " + l4.LagString(time.Duration(*l.Seconds*float64(time.Second)))
	case l.Unknown != "":
		return "lag unknown (" + l.Unknown + ")"
	}
	return ""
}

// TCPStatus holds a TCP VIP's event counters.
type TCPStatus struct {
	AcceptErrors   uint64 `json:"accept_errors" metric:"vip_accept_errors_total" help:"Failed accepts on a TCP VIP." text:"events/accept-errors,always"`
	IdleClosed     uint64 `json:"idle_closed" metric:"vip_idle_closed_total" help:"TCP connections closed by idle_timeout." text:"events/idle-closed,always"`
	LocalErrors    uint64 `json:"local_errors" metric:"vip_local_resource_errors_total" help:"Backend sockets or pipes refused for lack of local resources (descriptors, memory, ports)." text:"events/local-resource-errors,always"` // sockets or pipes refused for lack of local resources
	PipelessCopies uint64 `json:"pipeless_copies" metric:"vip_pipeless_copies_total" help:"Chunks copied through user space because no splice pipe was free." text:"events/pipeless-copies,always"`                                   // chunks copied in user space for want of a pipe
	LimitWaits     uint64 `json:"limit_waits" metric:"vip_limit_waits_total" help:"Times accepting paused at max_conns or the process-wide connection budget." text:"events/limit-waits,always"`                                      // times accepting paused at max_conns or the process budget
	// Clients reset for their PROXY header (accept_proxy_protocol).
	ProxyUntrusted uint64 `json:"proxy_untrusted,omitempty" metric:"vip_proxy_header_refused_total{reason=untrusted}" help:"Clients reset for their PROXY header (accept_proxy_protocol): reason untrusted, malformed or timeout." text:"proxy headers refused/untrusted"` // from outside accept_proxy_protocol_from
	ProxyMalformed uint64 `json:"proxy_malformed,omitempty" metric:"vip_proxy_header_refused_total{reason=malformed}" text:"proxy headers refused/malformed"`                                                                                                              // malformed, too long or cut short
	ProxyTimeouts  uint64 `json:"proxy_timeouts,omitempty" metric:"vip_proxy_header_refused_total{reason=timeout}" text:"proxy headers refused/timeout"`                                                                                                                   // not complete within connect_timeout
	// Clients closed for sending nothing within first_byte_timeout.
	FirstByteTimeouts uint64 `json:"first_byte_timeouts,omitempty" metric:"vip_first_byte_timeouts_total" help:"TCP clients closed for sending nothing within first_byte_timeout (no backend dialed)." text:"(first byte)/first-byte-timeouts"`
	// LostWakeups counts blocked directions the stall guard moved on:
	// their destination could take bytes, no wake-up came (expected 0).
	LostWakeups uint64 `json:"lost_wakeups,omitempty" metric:"vip_lost_wakeups_total" help:"Blocked directions whose destination could take bytes with no wake-up for two seconds, moved on by the stall guard (expected 0)." text:"(lost wake-ups)/lost-wakeups" note:"(moved on by the stall guard; expected 0: please report)"`
	// StallDegraded counts backends marked degraded because their
	// connections stalled (stall_timeout).
	StallDegraded uint64 `json:"stall_degraded,omitempty" metric:"vip_stall_degraded_total" help:"Backends of a TCP VIP marked degraded, out of new picks, because their connections stalled: requests unanswered for stall_timeout." text:"events/stall-degraded"`
	// Queued is how many connections wait in the VIP's queue now (every
	// backend at its max_conns or over its max_conn_rate; and those
	// failover_hold holds); QueueWaits how many ever waited for a slot, and
	// QueueTimeouts those reset when queue_timeout ran out.
	Queued        int64  `json:"queued" metric:"vip_queued" help:"TCP connections waiting now in the VIP's queue: for a backend slot (every backend at its max_conns or over its max_conn_rate), or held by failover_hold." kind:"gauge" text:"backends full/queued"`
	QueueWaits    uint64 `json:"queue_waits,omitempty" metric:"vip_queue_waits_total" help:"TCP connections that waited for a backend slot (every backend at its max_conns)." text:"backends full/queue-waits"`
	QueueTimeouts uint64 `json:"queue_timeouts,omitempty" metric:"vip_queue_timeouts_total" help:"TCP clients reset after waiting queue_timeout for a backend slot." text:"backends full/queue-timeouts"`
	// RateWaits: connections that waited for a backend (or, with
	// queue_timeout 0, were reset) while one was over its max_conn_rate.
	RateWaits uint64 `json:"rate_waits,omitempty" metric:"vip_rate_waits_total" help:"TCP connections that waited for a backend (or were reset, with queue_timeout 0) while one was over its max_conn_rate." text:"backends full/rate-waits"`
	// failover_hold: connections held now for want of an eligible
	// backend (waiting, or dialing the backend that came), held ever,
	// taken by a backend after the hold, reset when failover_hold ran out,
	// and reset because the hold was full.
	Holding       int64  `json:"holding,omitempty" metric:"vip_failover_holding" help:"TCP connections failover_hold holds now: no backend was eligible when they came (waiting, or dialing the backend that came since)." kind:"gauge" text:"failover hold/holding"`
	Held          uint64 `json:"held,omitempty" metric:"vip_failover_held_total" help:"TCP connections failover_hold held for want of an eligible backend, nothing dialed." text:"failover hold/held"`
	HoldReleased  uint64 `json:"hold_released,omitempty" metric:"vip_failover_released_total" help:"TCP connections held by failover_hold that a backend then took." text:"failover hold/released"`
	HoldExpired   uint64 `json:"hold_expired,omitempty" metric:"vip_failover_expired_total" help:"TCP clients reset after failover_hold with no backend eligible." text:"failover hold/expired"`
	HoldOverflows uint64 `json:"hold_overflows,omitempty" metric:"vip_failover_hold_full_total" help:"TCP clients reset at once because failover_hold held as many as it may (max_conns, else 4096)." text:"failover hold/full"`
	// Retries counts connects begun on another backend after one failed.
	Retries uint64 `json:"retries,omitempty" metric:"vip_connect_retries_total" help:"Backend connects begun on another backend after one failed (retries): the client did not see the failure." text:"events/retries,always"`
	// EarlyResetRetries counts connections retried on another backend
	// because theirs accepted and then reset or closed before sending a
	// byte (retry_on_reset); each is one of Retries too.
	EarlyResetRetries uint64 `json:"early_reset_retries,omitempty" metric:"vip_early_reset_retries_total" help:"TCP connections retried on another backend because theirs accepted and then reset or closed before sending a byte (retry_on_reset); counted in retries too." text:"events/early-reset-retries"`
	// Closes asked of an app_protocol VIP's connections (rebalance,
	// drain, on_down = "graceful", shutdown): made at a boundary of the
	// protocol, or fallen back to a plain close; and the connections
	// whose framing was lost or went TLS (their closes fall back).
	BoundaryCloses    uint64 `json:"boundary_closes,omitempty" metric:"vip_boundary_closes_total" help:"Connections of an app_protocol VIP closed at a boundary of the protocol (an idle session; a WebSocket Close frame) for a rebalance, drain, on_down = graceful or shutdown." text:"app closes/at-boundary"`
	BoundaryFallbacks uint64 `json:"boundary_fallbacks,omitempty" metric:"vip_boundary_fallbacks_total" help:"Closes asked of an app_protocol VIP's connections that fell back to a plain close or reset: no boundary in time, framing lost, TLS." text:"app closes/fallbacks"`
	FramingLost       uint64 `json:"framing_lost,omitempty" metric:"vip_framing_lost_total" help:"Connections of an app_protocol VIP whose server stream l4lb could not follow: TLS, or framing that made no sense." text:"app closes/framing-lost"`
}

// FailoverStatus holds a VIP's failover counters (either mode).
type FailoverStatus struct {
	Panics          uint64 `json:"panics,omitempty" metric:"vip_panics_total" help:"Times health left the VIP no backend for new flows and panic_mode sent them to the backends down by health." text:"failover/panics"`
	EjectionsCapped uint64 `json:"ejections_capped,omitempty" metric:"vip_ejections_capped_total" help:"Passive marks that would have taken more than max_ejected percent of the VIP's backends out: the backend was kept in." text:"failover/ejections-capped"`
	BackupCloses    uint64 `json:"backup_closes,omitempty" metric:"vip_backup_closes_total" help:"Connections and sessions of backup backends ended by on_backup_recovered when new flows went back to the primaries." text:"failover/backup-closes"`
}

// UDPStatus holds a UDP VIP's datagram counters (proxy.UDPStats says
// what each counts). Datagrams dropped for want of a backend are the
// VIP's NoBackend; refused clients its Denied and ClientLimited.
type UDPStatus struct {
	Datagrams uint64 `json:"datagrams" metric:"vip_udp_datagrams_total" help:"Client datagrams forwarded to backends." text:"(traffic)/datagrams,always"`
	Replies   uint64 `json:"replies" metric:"vip_udp_replies_total" help:"Backend datagrams relayed to clients." text:"(traffic)/replies,always"`
	Truncated uint64 `json:"truncated" metric:"vip_udp_truncated_total" help:"Datagrams too large for a UDP payload, dropped." text:"dropped/truncated,always"`
	// Dropped: datagrams a send did not take (a full socket buffer, an
	// error from the backend's socket).
	Dropped uint64 `json:"dropped" metric:"vip_udp_dropped_total" help:"Datagrams a send did not take (a full socket buffer, an error from the backend's socket)." text:"dropped/send-failed,always"`
	// SessionsRefused: datagrams from new clients dropped at
	// max_sessions (no session slot).
	SessionsRefused uint64 `json:"sessions_refused" metric:"vip_udp_sessions_refused_total" help:"Datagrams from new clients dropped at max_sessions (no session slot)." text:"dropped/no-session-slot,always"`
	Moved           uint64 `json:"moved" metric:"vip_udp_sessions_moved_total" help:"Sessions moved off a backend that went down." text:"(traffic)/moved,always"`
	// BackendsFull counts datagrams dropped because a new session found
	// every backend at its max_sessions.
	BackendsFull uint64 `json:"backends_full,omitempty" metric:"vip_udp_backends_full_total" help:"Datagrams dropped because a new session found every backend at its max_sessions." text:"dropped/backends-full,always"`
	// QueueDropped: client datagrams the kernel dropped on the VIP's
	// sockets (their receive queues were full).
	QueueDropped uint64 `json:"queue_dropped" metric:"vip_udp_queue_dropped_total" help:"Client datagrams the kernel dropped on the VIP's sockets: their receive queues were full." text:"dropped/queue-full,always"`
	// ReplyQueueDropped: backend replies the kernel dropped on session
	// sockets (receive queues full), counted as each session ends.
	ReplyQueueDropped uint64 `json:"reply_queue_dropped" metric:"vip_udp_reply_queue_dropped_total" help:"Backend replies the kernel dropped on session sockets (receive queues full), counted as each session ends." text:"dropped/reply-queue-full,always"`
	// SocketErrors: datagrams from new clients dropped because the
	// session's socket could not be opened (EMFILE and the like).
	SocketErrors uint64 `json:"socket_errors" metric:"vip_udp_socket_errors_total" help:"Datagrams from new clients dropped because the session's socket could not be opened (EMFILE, ENFILE, ENOBUFS, a connect error)." text:"dropped/socket-errors,always"`
}

// XDPVIPStatus holds an xdp VIP's counters (summed over CPUs).
type XDPVIPStatus struct {
	Packets   uint64 `json:"packets" metric:"vip_xdp_packets_total" help:"Packets the XDP program forwarded for an xdp VIP." text:"xdp/packets,always"`
	Bytes     uint64 `json:"bytes" metric:"vip_xdp_bytes_total" help:"Bytes the XDP program forwarded for an xdp VIP." text:"xdp/bytes,always,bytes"`
	NewFlows  uint64 `json:"new_flows" metric:"vip_xdp_new_flows_total" help:"Flows the XDP program pinned to a backend for an xdp VIP." text:"xdp/new-flows,always"`
	Drops     uint64 `json:"drops" metric:"vip_xdp_drops_total" help:"Packets to an xdp VIP that the XDP program dropped." text:"xdp/drops,always"` // acl_drops and syn_rate_drops included
	LiveFlows int64  `json:"live_flows" metric:"vip_xdp_live_flows" help:"Flows of an xdp VIP in the conntrack, seen lately." kind:"gauge" text:"xdp/live-flows,always"`
	XDPGuardStatus
	// Untracked counts packets of flows not in the conntrack forwarded
	// without an insert: the VIP was above its new_flow_rate.
	Untracked uint64 `json:"untracked" metric:"vip_xdp_untracked_total" help:"Packets of an xdp VIP's flows forwarded without a conntrack entry, over new_flow_rate." text:"xdp guards/untracked"`
}

// XDPGuardStatus holds what the XDP program's guards dropped for a VIP:
// an xdp VIP's (inside XDPVIPStatus), or a proxy VIP's whose packets the
// program sees first (VIPStatus.XDPGuard).
type XDPGuardStatus struct {
	ACLDrops     uint64 `json:"acl_drops" metric:"vip_xdp_acl_drops_total" help:"Packets the XDP program dropped for the VIP's allow/deny (xdp VIPs, and proxy VIPs it guards)." text:"xdp guards/acl-drops"` // clients refused by allow/deny
	SYNRateDrops uint64 `json:"syn_rate_drops" metric:"vip_xdp_syn_rate_drops_total" help:"SYNs to the VIP the XDP program dropped over [xdp] syn_rate_per_source." text:"xdp guards/syn-rate-drops"`         // SYNs over [xdp] syn_rate_per_source
}

// SNIStatus is a VIP's SNI routing: its routes and what matched none.
type SNIStatus struct {
	Timeout time.Duration `json:"timeout_ns"`
	NoMatch string        `json:"no_match"` // default | close
	Routes  []RouteStatus `json:"routes"`
	// Connections the VIP's own backends took for want of a route.
	Default uint64 `json:"default"`
	// Clients with a name no route lists or no name; not TLS or
	// malformed; no whole ClientHello within sni_timeout (reset).
	NoMatchCount uint64 `json:"sni_no_match"`
	NotTLS       uint64 `json:"sni_not_tls"`
	Timeouts     uint64 `json:"sni_timeout"`
	// Startup: a postgres VIP's startup packets (app_protocol postgres).
	Startup *StartupStatus `json:"startup,omitempty"`
}

// StartupStatus counts the first packets of a postgres VIP with routes
// that did not open with TLS (those count as SNI).
type StartupStatus struct {
	Routed    uint64 `json:"routed" metric:"vip_pg_startup_total{event=routed}" help:"First packets of a postgres VIP with routes (app_protocol postgres): event routed (a StartupMessage a route took by database and user), no_match (one no route took), encrypted (SSLRequest or GSSENCRequest: no readable startup), cancel (CancelRequest), malformed (reset, no backend dialed). All but routed go where sni_no_match says." text:"pg startup/routed,always"`
	NoMatch   uint64 `json:"no_match" metric:"vip_pg_startup_total{event=no_match}" text:"pg startup/no-match,always"`
	Encrypted uint64 `json:"encrypted" metric:"vip_pg_startup_total{event=encrypted}" text:"pg startup/ssl-or-gss,always"`
	Cancels   uint64 `json:"cancels" metric:"vip_pg_startup_total{event=cancel}" text:"pg startup/cancel,always"`
	Malformed uint64 `json:"malformed" metric:"vip_pg_startup_total{event=malformed}" text:"pg startup/malformed,always"`
}

// RouteStatus is one SNI route of a VIP in status.
type RouteStatus struct {
	Name  string   `json:"name"`
	Names []string `json:"names"`
	// Databases and Users: what a postgres VIP's route takes by startup.
	Databases []string        `json:"databases,omitempty"`
	Users     []string        `json:"users,omitempty"`
	Algorithm string          `json:"algorithm"`
	Eligible  int             `json:"eligible"`
	Routed    uint64          `json:"routed"` // connections its names brought
	Backends  []BackendStatus `json:"backends"`
}

// NameStatus is what a named backend's name answered.
type NameStatus struct {
	Backend string `json:"backend"` // the named backend's identity
	Lookup  string `json:"lookup"`  // name:port or the SRV name
	// Addresses are the last good answer, in use; empty: the name has
	// never resolved and the backend is absent.
	Addresses []string `json:"addresses"`
	// AnswerAge is how long ago a lookup last gave a good answer (0: never).
	AnswerAge float64 `json:"answer_age_seconds"`
	// Error is the last lookup's error while lookups fail (the last good
	// answer stays in use); FailingFor how long they have.
	Error      string  `json:"error,omitempty"`
	FailingFor float64 `json:"failing_for_seconds,omitempty"`
	Errors     uint64  `json:"errors"` // failed or empty lookups since the name was first watched
}
