// Status: what runs, for the admin API and `l4lb status`.

package reconcile

import (
	"cmp"
	"slices"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

// Status is the runtime's state at one moment.
type Status struct {
	Process ProcessStatus `json:"process"` // filled by the process that serves the status
	Config  string        `json:"config"`
	Pipes   PipeStatus    `json:"pipes"`
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
	// Stopping: l4lb is shutting down; its VIPs accept nothing and are
	// listed as draining until their connections end.
	Stopping bool        `json:"stopping,omitempty"`
	VIPs     []VIPStatus `json:"vips"`
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
}

// BGPPeerStatus is one BGP session.
type BGPPeerStatus struct {
	Address       string    `json:"address"`
	ASN           uint32    `json:"asn"`
	State         string    `json:"state"` // idle, connect, active, opensent, openconfirm, established
	Up            bool      `json:"up"`
	Since         time.Time `json:"since,omitzero"` // when the session came up
	UptimeSeconds float64   `json:"uptime_seconds,omitempty"`
	PrefixesSent  int       `json:"prefixes_sent"`
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

// XDPStatus describes the XDP program.
type XDPStatus struct {
	Interface string `json:"interface"`
	Attach    string `json:"attach"`             // driver | generic
	PinPath   string `json:"pin_path,omitempty"` // maps and link pinned here: a restart adopts them
	LiveFlows int    `json:"live_flows"`         // flows in the conntrack seen lately, all VIPs
	// Counters are the program's global counters that are not zero:
	// packets passed to the kernel and dropped, by reason; flow table events.
	Counters map[string]uint64 `json:"counters"`
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
	// Queued is how many connections wait for a backend slot now (every
	// backend at its max_conns); QueueWaits how many ever did, and
	// QueueTimeouts those reset when queue_timeout ran out.
	Queued        int64  `json:"queued" metric:"vip_queued" help:"TCP connections waiting now for a backend slot (every backend at its max_conns)." kind:"gauge" text:"backends full/queued"`
	QueueWaits    uint64 `json:"queue_waits,omitempty" text:"backends full/queue-waits"`
	QueueTimeouts uint64 `json:"queue_timeouts,omitempty" metric:"vip_queue_timeouts_total" help:"TCP clients reset after waiting queue_timeout for a backend slot." text:"backends full/queue-timeouts"`
}

// VIPStatus describes one running VIP.
type VIPStatus struct {
	Name string `json:"name"`
	// Draining: a reload removed the VIP, or l4lb is stopping; it accepts
	// nothing and is listed until its last connection ends or
	// drain_timeout resets it.
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
	// "backups" (no primary is eligible) or "none"; absent when the VIP
	// has no backup backend.
	Serving string `json:"serving,omitempty"`
	// Names are the DNS names of the VIP's named backends: each one's
	// last good answer (its backends), its age, and the last error.
	Names []NameStatus `json:"names,omitempty"`
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
	MaxFlows     int64  `json:"max_flows,omitempty"`
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
	LastCheck     string    `json:"last_check,omitempty"`
	Since         time.Time `json:"since,omitzero"`
}

// Status reports every VIP, in the config file's order, and its backends.
func (r *Runtime) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	var st Status
	if r.cfg != nil {
		st.Config = r.cfg.Path
	}
	st.Stopping = r.closed
	st.Pipes = PipeStatus{Open: r.pipes.Open(), Lent: r.pipes.Lent(), Max: r.pipes.Max()}
	if r.loops != nil {
		sessions := r.loops.Sessions()
		st.BusyPoll = r.loops.BusyPoll()
		for i, n := range r.loops.Conns() {
			st.Workers = append(st.Workers, WorkerStatus{Conns: n, UDPSessions: sessions[i]})
		}
	}
	if r.xdp != nil {
		st.XDP = r.xdp.status()
	}
	now := time.Now()
	for _, v := range r.vips {
		vs := v.status()
		if r.cfg != nil {
			if tv := r.cfg.VIP(vs.Name); tv != nil {
				vs.Names = r.dns.status(tv, now)
			}
		}
		for i := range vs.Backends {
			if !vs.Backends[i].Removed {
				r.healthStatus(v, &vs.Backends[i])
			}
		}
		r.sniStatus(v, &vs)
		st.VIPs = append(st.VIPs, vs)
	}
	for v := range r.drainingVIPs {
		vs := v.status()
		vs.Draining = true
		st.VIPs = append(st.VIPs, vs)
	}
	sortVIPs(st.VIPs, r.cfg)
	return st
}

// sortVIPs puts VIPs in the order of the config file, as an operator
// wrote them; draining VIPs (gone from the file) come last, by name.
func sortVIPs(vips []VIPStatus, cfg *config.Config) {
	pos := map[string]int{}
	if cfg != nil {
		for i := range cfg.VIPs {
			pos[cfg.VIPs[i].Name] = i
		}
	}
	at := func(v VIPStatus) int {
		if i, ok := pos[v.Name]; ok && !v.Draining {
			return i
		}
		return len(pos)
	}
	slices.SortFunc(vips, func(a, b VIPStatus) int {
		return cmp.Or(cmp.Compare(at(a), at(b)), cmp.Compare(a.Name, b.Name), cmp.Compare(boolInt(a.Draining), boolInt(b.Draining)))
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (v *vip) status() VIPStatus {
	vc := v.cfg()
	s := VIPStatus{
		Name: vc.Name, Listen: v.key.Addr.String(), Protocol: v.key.Proto.String(),
		Algorithm: vc.Algorithm.String(), Eligible: v.store.Load().Len(),
	}
	effective := map[*l4.Backend]uint32{}
	if snap := v.store.Load(); snap != nil {
		for _, m := range snap.Members {
			w := m.Weight
			if scalesWeights(vc) {
				w = (w + 50) / 100 // weights in hundredths there (effectiveMembers)
			}
			effective[m.Backend] = w
		}
	}
	v.mu.Lock()
	for _, b := range v.backends {
		bs := b.status()
		bs.EffectiveWeight = effective[b.b]
		bs.Backup = b.conf.Backup
		s.Backends = append(s.Backends, bs)
		if b.conf.Backup && s.Serving == "" {
			_, s.Serving = servingSet(v.backends, vc)
		}
	}
	s.Backends = append(s.Backends, v.retiredStatusLocked()...)
	rb := v.rebal
	var rows []balanceRow
	if rb != nil {
		rows = v.balanceRowsLocked()
	}
	v.mu.Unlock()
	if rb != nil {
		st := rb.statusWith(rows)
		s.Rebalance = &st
	}
	slices.SortFunc(s.Backends, func(a, b BackendStatus) int { return cmp.Compare(a.ID, b.ID) })
	v.dp.fillStatus(&s)
	v.guard.fillStatus(&s)
	return s
}

// retiredStatusLocked lists removed backends that still hold flows, and
// forgets those whose last flow ended (v.mu held).
func (v *vip) retiredStatusLocked() []BackendStatus {
	var out []BackendStatus
	keep := v.retired[:0]
	for _, b := range v.retired {
		if b.b.LiveFlows() == 0 {
			continue
		}
		keep = append(keep, b)
		bs := b.status()
		bs.Health, bs.Removed = "removed", true
		out = append(out, bs)
	}
	clear(v.retired[len(keep):])
	v.retired = keep
	return out
}

func (b *backend) status() BackendStatus {
	rtt, _ := b.b.RTT().Value()
	bs := BackendStatus{
		ID: string(b.b.ID), Address: b.b.Addr.String(), Index: b.b.Index, Weight: b.weight,
		Health: b.health.String(), LiveFlows: b.b.LiveFlows(), MaxFlows: b.b.MaxFlows(),
		Flows: b.b.Stats.Flows.Load(), ConnectFails: b.b.Stats.ConnectFails.Load(), Unanswered: b.b.Stats.Unanswered.Load(),
		BytesIn: b.b.Stats.BytesIn.Load(), BytesOut: b.b.Stats.BytesOut.Load(), RTT: rtt,
		Underflows: b.b.Underflows(),
	}
	if b.override.state != l4.OverrideNone {
		bs.Override, bs.OverrideBy, bs.OverrideSince = b.override.state.String(), b.override.by, b.override.since
	}
	return bs
}
