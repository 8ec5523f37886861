// The keys of a [[vip]] table (and of [defaults]): one row each.

package config

import (
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// vipKeys are the keys of a [[vip]] table, in the order Format writes
// them. [defaults] may set every one but the ownOnly ones.
var vipKeys = []key[VIP]{
	{name: "name", ownOnly: true, val: requiredName(func(v *VIP) *string { return &v.Name }), def: "(required)", effect: EffectNow, note: "status and metrics use the new name",
		doc: `Names the VIP in status, metrics, logs and the admin verbs; unique.`},
	{name: "listen", ownOnly: true, val: vipListen(), def: "(required)",
		reload: "another address is another VIP: the running one is removed (it drains) and this one starts",
		doc:    `The address and port the VIP serves, ip:port ("[2001:db8::10]:5432" for IPv6); unique per protocol.`},
	{name: "protocol", ownOnly: true, val: vipProtocol(),
		reload: "another protocol is another VIP: the running one is removed and this one starts",
		doc:    `The transport the VIP balances.`},
	{name: "mode", val: enumOf(func(v *VIP) *l4.Mode { return &v.Mode }, l4.ModeProxy, l4.ModeNames()),
		effect: EffectVIPRestart, note: "every backend starts new (health unknown); a proxy UDP VIP's sessions move at their next datagram",
		doc: `The data plane: proxy, the user-space TCP/UDP proxy; xdp, the fast path in the NIC driver (needs an [xdp] table; backends answer clients directly).`},
	{name: "app_protocol", scope: tcpProxy, refused: "applies only to tcp VIPs in proxy mode (l4lb reads the protocol's framing as bytes pass through it)",
		val:    enumOf(func(v *VIP) *l4.AppProtocol { return &v.AppProtocol }, l4.AppNone, l4.AppProtocolNames()),
		effect: EffectNewFlows,
		doc:    `The application protocol the VIP carries, for the features that read its framing as bytes pass (never its queries or payload): none, opaque bytes; postgres; mysql; websocket.`},
	{name: "kernel_forwarding", scope: tcpProxy, refused: "applies only to tcp VIPs in proxy mode",
		val:    enumOf(func(v *VIP) *l4.KernelFwd { return &v.KernelForwarding }, l4.KernelFwdGlobal, l4.KernelFwdNames()),
		effect: EffectNewFlows,
		doc:    `This VIP's kernel forwarding of established connections ([global] kernel_forwarding): global, as [global] says; auto; off.`},
	{name: "algorithm", val: enumBy(func(v *VIP) *l4.Algorithm { return &v.Algorithm }, defaultAlgorithm, l4.AlgorithmNames()),
		effect: EffectNewFlows, def: `"round_robin" (mode proxy), "maglev" (mode xdp)`,
		doc: `How a new flow picks its backend. Mode xdp supports maglev only (least_conn and least_time become Maglev weights there).`},
	{name: "hash_key", scope: hashing, val: enumBy(func(v *VIP) *l4.HashKey { return &v.HashKey }, defaultHashKey, l4.HashKeyNames()),
		effect: EffectNewFlows, def: `"src_ip"; "5tuple" with maglev in mode xdp`,
		doc: `What source_hash and maglev hash: src_ip keeps a reconnecting client on its backend; 5tuple spreads one client's flows as ECMP does.`},
	{name: "hash_balance_factor", scope: hashingProxy, val: intOf(func(v *VIP) *int { return &v.HashBalanceFactor }, 0, orOff[int64](100, 1000)),
		effect: EffectNewFlows,
		doc:    `Caps a backend's live flows at this percent of the mean (125 = 1.25 times) and spills a client over to the next backend; 0 = off.`},
	{name: "maglev_table_size", scope: maglevOnly, val: intOf(func(v *VIP) *int { return &v.MaglevTableSize }, 65537, span[int64](1009, 1000003)),
		check: checkPrimeTable, effect: EffectNewFlows, rule: "a prime in 1009..1000003",
		doc: `Slots of the Maglev lookup table; at least 100 times the backends.`},
	{name: "least_time_default", scope: leastTime, val: durationOf(func(v *VIP) *time.Duration { return &v.LeastTimeDefault }, time.Millisecond, span(time.Microsecond, 10*time.Second)),
		effect: EffectNewFlows,
		doc:    `The RTT assumed for a backend before its first sample, so that it is neither starved nor flooded.`},
	{name: "least_time_bias", scope: leastTime, val: durationOf(func(v *VIP) *time.Duration { return &v.LeastTimeBias }, time.Millisecond, span(0, 10*time.Second)),
		effect: EffectNewFlows,
		doc:    `Added to every RTT in the least_time score: a per-flow cost independent of distance, so that sub-millisecond RTT noise does not decide and a far backend still gets flows under load.`},
	{name: "least_time_alpha", scope: leastTime, val: floatOf(func(v *VIP) *float64 { return &v.LeastTimeAlpha }, 0.3),
		check: checkAlpha, effect: EffectNewFlows, note: "RTT estimates take new samples with it", rule: "(0, 1]",
		doc: `The weight of a new RTT sample in the moving average: higher reacts faster.`},
	{name: "least_time_metric", scope: leastTime, val: enumOf(func(v *VIP) *l4.RTTMetric { return &v.LeastTimeMetric }, l4.MetricConnect, l4.RTTMetricNames()),
		effect: EffectNewFlows, note: "probes restart to measure it; health states are kept",
		doc: `The RTT sample: connect, the TCP handshake; first_byte, until the first reply byte of the health check (checks that read a reply).`},
	{name: "connect_timeout", scope: tcpProxy, val: durationOf(func(v *VIP) *time.Duration { return &v.ConnectTimeout }, 2*time.Second, span(time.Millisecond, 5*time.Minute)),
		effect: EffectNewFlows,
		doc:    `How long a connect to a backend may take before the next backend is tried. Also bounds the wait for a client's PROXY header.`},
	{name: "retries", scope: tcpProxy, val: intOf(func(v *VIP) *int { return &v.Retries }, 2, span[int64](0, 15)),
		effect: EffectNewFlows,
		doc:    `Further backends tried after a failed connect; the client has sent nothing that is lost.`},
	{name: "idle_timeout", scope: tcpProxy, val: durationOf(func(v *VIP) *time.Duration { return &v.IdleTimeout }, time.Hour, span(time.Second, 7*24*time.Hour)),
		effect: EffectNewFlows,
		doc:    `No byte either way for this long closes the connection (FIN to both sides).`},
	{name: "keepalive", scope: tcpProxy, val: durationOf(func(v *VIP) *time.Duration { return &v.KeepAlive }, time.Minute, orOff(time.Second, 2*time.Hour)),
		effect: EffectNewFlows,
		doc:    `TCP keepalive idle time on both sides of a connection; 0 = off.`},
	{name: "max_conns", scope: tcpProxy, refused: "applies only to tcp VIPs in proxy mode (udp VIPs: max_sessions)",
		val:    intOf(func(v *VIP) *int { return &v.MaxConns }, 0, span[int64](0, 10_000_000)),
		effect: EffectNow, note: "no connection is cut: below the new limit the VIP stops accepting until enough end",
		doc: `Live connections of the VIP; at the limit it stops accepting and new clients wait in the listen backlog (HAProxy maxconn); 0 = no limit.`},
	{name: "freebind", scope: proxyMode, refused: "applies only to mode proxy (an xdp VIP binds no socket)",
		val:    boolOf(func(v *VIP) *bool { return &v.Freebind }, false),
		effect: EffectNextBind, note: "the running socket is bound already",
		doc: `Binds the listen address before any interface has it (IP_FREEBIND), for keepalived or a BGP speaker that adds it later; false makes a missing address fail at start.`},
	{name: "defer_accept", scope: tcpProxy, val: boolOf(func(v *VIP) *bool { return &v.DeferAccept }, false),
		effect: EffectNewFlows, note: "set on the running listener",
		doc: `TCP_DEFER_ACCEPT: a connection reaches l4lb, and a backend is dialed, only once the client has sent data. Unsafe for server-speaks-first protocols (MySQL, SMTP, FTP), whose clients then wait about a second.`},
	{name: "announce", val: boolOf(func(v *VIP) *bool { return &v.Announce }, true),
		effect: EffectNow, note: "the address is announced or withdrawn over BGP at once",
		doc: `With [bgp]: announce the VIP's address while it has an eligible backend; false opts this VIP out.`},
	{name: "first_byte_timeout", scope: tcpProxy, val: durationOf(func(v *VIP) *time.Duration { return &v.FirstByteTimeout }, 0, orOff(time.Millisecond, time.Hour)),
		effect: EffectNewFlows,
		doc:    `A client that sends nothing this long after connecting is closed (FIN) before any backend is dialed; 0 = off. Only for protocols whose client speaks first (HTTP, TLS, Redis, PostgreSQL).`},
	{name: "stall_timeout", scope: tcpProxy, refused: "applies only to tcp VIPs in proxy mode (it watches proxied connections)",
		val:    durationOf(func(v *VIP) *time.Duration { return &v.StallTimeout }, 0, orOff(100*time.Millisecond, time.Hour)),
		effect: EffectNow, note: "backends it marked degraded are re-admitted when it is turned off",
		doc: `A backend whose connections stall is degraded, out of new picks: a connection stalls when the client's bytes reached the backend after its last byte back and no byte has come back for this long; a backend is degraded when one of its connections stalls and none of its connections got a byte back since that request was sent (a hung server process that the kernel still acknowledges for: TCP checks pass). Back at its first byte back, or after this long with no stalled connection and no reply (nothing left to tell); never the VIP's last eligible backend; 0 = off. Set it above the longest request a server may take while nothing else it serves gets a reply.`},
	{name: "queue_timeout", scope: tcpProxy, refused: "applies only to tcp VIPs in proxy mode (it is how long a connection waits when every backend is at its max_conns)",
		val:    durationOf(func(v *VIP) *time.Duration { return &v.QueueTimeout }, 5*time.Second, orOff(time.Millisecond, time.Hour)),
		effect: EffectNewFlows, note: "connections already waiting keep the time they started with",
		doc: `When every backend is at its max_conns, a new connection waits this long, served in arrival order as backends free a slot, then is reset; 0 = reset at once.`},
	{name: "failover_hold", scope: tcpProxy, val: durationOf(func(v *VIP) *time.Duration { return &v.FailoverHold }, 0, orOff(time.Millisecond, 10*time.Minute)),
		effect: EffectNewFlows, note: "connections already held keep the time they started with",
		doc: `A new connection that finds no eligible backend (all down, as for the seconds of a primary's promotion), or whose connects failed on every backend, is not reset: it waits this long, nothing dialed, and goes in arrival order to the first backend that becomes eligible (PgBouncer's PAUSE/RESUME at L4, for any protocol); then it is reset as without it. At most max_conns (else 4096) are held at once, more are reset. 0 = off.`},
	{name: "proxy_protocol", scope: sendsProxy, val: enumOf(func(v *VIP) *l4.ProxyVersion { return &v.ProxyProtocol }, l4.ProxyOff, l4.ProxyVersionNames()),
		effect: EffectNewFlows,
		doc:    `Send a PROXY protocol header of this version to the backend before any client byte (the health checks send it too: health send_proxy).`},
	{name: "accept_proxy_protocol", scope: acceptsProxy, val: enumOf(func(v *VIP) *l4.ProxyAccept { return &v.AcceptProxyProtocol }, l4.AcceptProxyOff, l4.ProxyAcceptNames()),
		effect: EffectNewFlows, note: "established connections keep the client address they started with",
		doc: `Every client must send a PROXY header first, within connect_timeout, from a network in accept_proxy_protocol_from: l4lb runs behind another balancer, and the header's source is the client from then on. A missing, malformed or late header resets the client.`},
	{name: "accept_proxy_protocol_from", scope: acceptOn, refused: "applies only with accept_proxy_protocol on (tcp VIPs in proxy mode)",
		val:    prefixesOf(func(v *VIP) *[]netip.Prefix { return &v.AcceptProxyProtocolFrom }),
		effect: EffectNewFlows,
		doc:    `Required with accept_proxy_protocol: the networks (or addresses) of the balancers in front; a connection from anywhere else is reset, since its header could claim any client.`},
	{name: "sni_timeout", scope: withRoutes, val: durationOf(func(v *VIP) *time.Duration { return &v.SNITimeout }, 5*time.Second, span(time.Millisecond, 5*time.Minute)),
		effect: EffectNewFlows,
		doc:    `How long a client has to send its whole TLS ClientHello (on a postgres VIP: or its startup packet); then it is reset, no backend dialed.`},
	{name: "sni_no_match", scope: withRoutes, val: enumOf(func(v *VIP) *l4.SNINoMatch { return &v.SNINoMatch }, l4.SNINoMatchDefault, l4.SNINoMatchNames()),
		effect: EffectNewFlows,
		doc:    `Where a connection goes that no route takes (a name no route lists, no name, not TLS; on a postgres VIP also a database and user no route lists, an SSLRequest, GSSENCRequest or CancelRequest): default, the VIP's own backends; close, reset with no backend dialed.`},
	{name: "route", ownOnly: true, val: subTable("[[vip.route]]", func(v *VIP) string { return routesText(v.Routes) }, func(dst, src *VIP) { dst.Routes = src.Routes }),
		effect: EffectNewFlows, note: "connections already routed keep their route and backend",
		doc: `The VIP's SNI routes (tcp VIPs in proxy mode); on a VIP with app_protocol = "postgres" also routes by the StartupMessage's database and user.`},
	{name: "affinity_timeout", scope: tcpProxy, val: durationOf(func(v *VIP) *time.Duration { return &v.AffinityTimeout }, 0, span(0, 24*time.Hour)),
		effect: EffectNewFlows, note: "the affinity table starts empty: clients' pins are forgotten",
		doc: `A client address's new connections go to the backend it used last, while that backend is eligible, for this long; 0 = off. With [flow_sync] the pins go to the peers too, so a client keeps its backend through another balancer.`},
	{name: "rebalance_rate", scope: tcpProxy, refused: "applies only to tcp VIPs in proxy mode (l4lb rebalance closes proxied connections)",
		val:    intOf(func(v *VIP) *int { return &v.RebalanceRate }, 10, span[int64](0, MaxRebalanceRate)),
		effect: EffectNow, note: "the next rebalance; 0 refuses rebalances and stops a running one",
		doc: "Connections per second `l4lb rebalance` closes (FIN both ways) on the backends above their share; 0 = this VIP refuses rebalancing."},
	{name: "session_timeout", scope: udpOnly, val: durationOf(func(v *VIP) *time.Duration { return &v.SessionTimeout }, 30*time.Second, span(time.Second, time.Hour)),
		effect: EffectNow, note: "every session, established ones too",
		doc: `A client's UDP session ends after this long without a datagram.`},
	{name: "max_sessions", scope: udpProxy, val: intOf(func(v *VIP) *int { return &v.MaxSessions }, 65536, span[int64](1, 16<<20)),
		effect: EffectNewFlows, note: "no session is ended",
		doc: `Concurrent UDP sessions of the VIP; a datagram that would start one more is dropped.`},
	{name: "udp_responses", scope: udpProxy, refused: "applies only to udp VIPs in proxy mode (in xdp mode replies bypass l4lb)",
		val:    intOf(func(v *VIP) *int { return &v.UDPResponses }, 0, span[int64](0, 65535)),
		effect: EffectNow, note: "counted on established sessions too",
		doc: `A session ends after this many replies (1 for DNS); 0 = no limit. Set, it also says replies are expected: a session that times out without one is a passive health mark on its backend.`},
	{name: "forward", scope: xdpMode, val: enumOf(func(v *VIP) *l4.Forward { return &v.Forward }, l4.ForwardIPIP, l4.ForwardNames()),
		effect: EffectNow, note: "every packet from then on, established flows too",
		doc: "How the XDP program hands a packet to its backend: ipip, encapsulated (backends decapsulate: `l4lb decap attach`); l2, the destination MAC rewritten (backends on the same segment); gue, encapsulated in UDP to [xdp] gue_port with a source port per flow, so a backend's NIC spreads flows over its receive queues (backends strip it: `l4lb decap attach --gue-port`, or the kernel's fou); nat, destination rewritten to the backend and source to [xdp]'s NAT address and a port (backends need nothing, replies come back through the balancer and see the NAT address, not the client's)."},
	{name: "new_flow_rate", scope: xdpMode, refused: "applies only to mode xdp (the BPF conntrack)",
		val:    intOf(func(v *VIP) *int { return &v.NewFlowRate }, 0, span[int64](0, 100_000_000)),
		effect: EffectNow, note: "flows already tracked stay tracked",
		doc: `New flows a second the VIP enters into the BPF flow table; above it new flows are still forwarded by the Maglev table, only not tracked, so a spoofed flood cannot push established flows out; 0 = no cap.`},
	{name: "backup_mode", val: enumOf(func(v *VIP) *l4.BackupMode { return &v.BackupMode }, l4.BackupFirst, l4.BackupModeNames()),
		effect: EffectNow, note: "while the backups serve, the next rebuild of the VIP's table",
		doc: `Which backup backends serve while no primary is eligible: first, the first eligible one in file order (HAProxy's default); all, every eligible one (HAProxy allbackups, nginx); sticky, non-preemptive failover for a database primary: one backend serves at a time (the first eligible in file order at start), new flows stay on it until it is no longer eligible, then go to the next eligible one in the running order, and a backend that comes back joins the end of that order (it takes flows again only when those before it fail).`},
	// Failover and retry keys (issue 28).
	{name: "on_backup_recovered", scope: proxyMode, refused: "applies only to mode proxy (an xdp VIP's flows are the kernel's; its backups keep them)",
		val:    enumOf(func(v *VIP) *l4.OnBackupRecovered { return &v.OnBackupRecovered }, l4.BackupRecoveredKeep, l4.OnBackupRecoveredNames()),
		effect: EffectNow, note: "the next return to the primaries",
		doc: `What happens to the established connections and UDP sessions of backup backends when new flows go back to the primaries (a primary is eligible again): keep, they continue; close, they are reset, so that clients reconnect to a primary (HAProxy on-marked-up shutdown-backup-sessions); graceful, closed (FIN both ways) at the next boundary of the VIP's app_protocol, at once without one. No effect with backup_mode = "sticky", where flows never go back by themselves.`},
	{name: "retry_on_reset", scope: tcpProxy, val: enumOf(func(v *VIP) *l4.RetryOnReset { return &v.RetryOnReset }, l4.RetryResetUnsent, l4.RetryOnResetNames()),
		effect: EffectNewFlows,
		doc:    "A backend that accepts a connection and then resets or closes it before it sent any byte (its listener closed with connections in its accept queue, a process restart) is retried on another backend under retries, counted (early_reset_retries) and logged as a retry: off, the reset (or close) is passed to the client; unsent, retried while no client byte was written to that backend (nothing reached its application: always safe); unanswered, also after client bytes were written, while l4lb still holds all of them (at most 16 KiB, kept until the backend's first byte) and sends them again to the next backend: a backend that read them and died before answering sees them twice, so only for protocols whose opening may be repeated (a PostgreSQL or MySQL login, a TLS ClientHello, an idempotent request)."},
	{name: "capacity_guard", val: boolOf(func(v *VIP) *bool { return &v.CapacityGuard }, false),
		effect: EffectNow, note: "the next drain, disable or check --diff",
		doc: "`l4lb drain` and `disable` refuse (exit 1 with the numbers; `--force` overrides) when the backend would leave the VIP no eligible backend, or the rest too little room for its live flows (their max_conns when all have one, else the most each was seen to hold); `check --diff` warns the same for a reload."},
	{name: "allow", val: prefixesOf(func(v *VIP) *[]netip.Prefix { return &v.Allow }), effect: EffectNewFlows, note: accessNote,
		doc: `Client networks (or addresses) allowed. The most specific network that holds the client decides; a client in neither list is allowed when allow is empty, refused otherwise (TCP reset, datagram dropped, before any backend is chosen).`},
	{name: "deny", val: prefixesOf(func(v *VIP) *[]netip.Prefix { return &v.Deny }), effect: EffectNewFlows, note: accessNote,
		doc: `Client networks (or addresses) refused; a network in both lists is an error.`},
	{name: "max_conns_per_client", scope: tcpProxy, refused: "applies only to tcp VIPs in proxy mode (udp VIPs: max_sessions_per_client)",
		val:    intOf(func(v *VIP) *int { return &v.MaxConnsPerClient }, 0, span[int64](0, 10_000_000)),
		effect: EffectNewFlows, note: "no connection is cut; open ones count against the new limit",
		doc: `Open connections from one client address; over it a connection is reset at once; 0 = off.`},
	{name: "conn_rate_per_client", scope: proxyMode, refused: "is not supported in mode xdp (use [xdp] syn_rate_per_source)",
		val:    intOf(func(v *VIP) *int { return &v.ConnRatePerClient }, 0, span[int64](0, 10_000_000)),
		effect: EffectNewFlows,
		doc:    `New connections or UDP sessions a second from one client address, in bursts of up to one second's worth; 0 = off.`},
	{name: "max_sessions_per_client", scope: udpProxy, refused: "applies only to udp VIPs in proxy mode (tcp VIPs: max_conns_per_client)",
		val:    intOf(func(v *VIP) *int { return &v.MaxSessionsPerClient }, 0, span[int64](0, 16<<20)),
		effect: EffectNewFlows, note: "no session is ended; open ones count against the new limit",
		doc: `Open UDP sessions from one client address; a datagram that would start one more is dropped; 0 = off.`},
	{name: "log_connections", scope: proxyMode, refused: noConnLog,
		val:    boolOf(func(v *VIP) *bool { return &v.LogConnections }, false),
		effect: EffectNewFlows, note: "established connections and sessions keep the value they started with",
		doc: `One info line when a connection or UDP session ends: client, backend, why it ended, times, bytes (needs log_level info or debug).`},
	{name: "log_connections_rate", scope: proxyMode, refused: noConnLog,
		val:    intOf(func(v *VIP) *int { return &v.LogConnectionsRate }, 1000, span[int64](0, 1_000_000)),
		effect: EffectNow, note: "every line from then on",
		doc: `Connection lines a second for the VIP; lines over it are counted and summed up in one warning a second; 0 = no cap.`},
	{name: "health", val: subTable[VIP]("[vip.health]", nil, func(dst, src *VIP) { dst.Health = src.Health }),
		doc: `The VIP's health check.`},
	{name: "backend", ownOnly: true, val: subTable[VIP]("[[vip.backend]]", nil, func(dst, src *VIP) { dst.Backends = src.Backends }),
		doc: `The VIP's backends, at least one.`},
}

const noConnLog = "is not supported in mode xdp: the kernel forwards an xdp VIP's flows, so l4lb never sees them end"

// accessNote is what an allow/deny change leaves alone.
const accessNote = "established TCP connections are not cut; with the XDP program attached, a newly refused client's UDP datagrams are dropped there, sessions included"

// vipScope is the VIPs some keys apply to.
type vipScope struct {
	where string
	test  func(v *VIP) bool
}

func (s *vipScope) applies(v *VIP) bool { return s.test(v) }
func (s *vipScope) String() string      { return s.where }

// The scopes of VIP keys.
var (
	hashing      = &vipScope{"algorithm source_hash or maglev", isHashing}
	hashingProxy = &vipScope{"algorithm source_hash or maglev in proxy mode", func(v *VIP) bool { return isHashing(v) && v.Mode == l4.ModeProxy }}
	maglevOnly   = &vipScope{"algorithm maglev", func(v *VIP) bool { return v.Algorithm == l4.Maglev }}
	leastTime    = &vipScope{"algorithm least_time", isLeastTime}
	tcpProxy     = &vipScope{"tcp VIPs in proxy mode", isTCPProxy}
	proxyMode    = &vipScope{"mode proxy", isProxy}
	xdpMode      = &vipScope{"mode xdp", func(v *VIP) bool { return v.Mode == l4.ModeXDP }}
	udpOnly      = &vipScope{"udp VIPs", func(v *VIP) bool { return v.Protocol == l4.UDP }}
	udpProxy     = &vipScope{"udp VIPs in proxy mode", func(v *VIP) bool { return v.Protocol == l4.UDP && v.Mode == l4.ModeProxy }}
	withRoutes   = &vipScope{"VIPs with [[vip.route]] tables (SNI routing)", hasRoutes}
	acceptOn     = &vipScope{"tcp VIPs in proxy mode with accept_proxy_protocol on", func(v *VIP) bool {
		return isTCPProxy(v) && v.AcceptProxyProtocol != l4.AcceptProxyOff
	}}
	// off is fine anywhere: a VIP may say it sends or takes no header.
	sendsProxy   = &vipScope{"tcp VIPs in proxy mode", func(v *VIP) bool { return isTCPProxy(v) || v.ProxyProtocol == l4.ProxyOff }}
	acceptsProxy = &vipScope{"tcp VIPs in proxy mode", func(v *VIP) bool { return isTCPProxy(v) || v.AcceptProxyProtocol == l4.AcceptProxyOff }}
)

func isHashing(v *VIP) bool   { return v.Algorithm.Hashing() }
func isLeastTime(v *VIP) bool { return v.Algorithm == l4.LeastTime }
func isTCPProxy(v *VIP) bool  { return v.Protocol == l4.TCP && v.Mode == l4.ModeProxy }
func isProxy(v *VIP) bool     { return v.Mode == l4.ModeProxy }
func hasRoutes(v *VIP) bool   { return len(v.Routes) > 0 }

// defaultAlgorithm: maglev is the only algorithm of mode xdp.
func defaultAlgorithm(v *VIP) l4.Algorithm {
	if v.Mode == l4.ModeXDP {
		return l4.Maglev
	}
	return l4.RoundRobin
}

// defaultHashKey: source_hash keeps a client on its backend; maglev in
// xdp mode spreads one client's flows as the kernel's ECMP does.
func defaultHashKey(v *VIP) l4.HashKey {
	if v.Mode == l4.ModeXDP && v.Algorithm == l4.Maglev {
		return l4.HashFiveTuple
	}
	return l4.HashSrcIP
}

// checkPrimeTable refuses a Maglev table size that is not a prime.
func checkPrimeTable(l *layer, v *VIP) {
	if !isPrime(v.MaglevTableSize) {
		l.problem("maglev_table_size", "%d is not a prime (try 1009, 10007, 65537, 655373 or 1000003)", v.MaglevTableSize)
		v.MaglevTableSize = 65537
	}
}

// checkAlpha keeps least_time_alpha in (0, 1].
func checkAlpha(l *layer, v *VIP) {
	if !(v.LeastTimeAlpha > 0 && v.LeastTimeAlpha <= 1) {
		l.problem("least_time_alpha", "%v is out of range (0, 1]", v.LeastTimeAlpha)
		v.LeastTimeAlpha = 0.3
	}
}

// vipListen is the required ip:port; [defaults] cannot set it.
func vipListen() keyValue[VIP] {
	return keyValue[VIP]{
		resolve: func(l *layer, key string, own, _ rawTable, v *VIP) { v.Listen = l.addrPort(key, get[string](own, key)) },
		text:    func(v *VIP) string { return v.Listen.String() },
		toml:    func(v *VIP) string { return quoteTOML(v.Listen.String()) },
		copy:    func(dst, src *VIP) { dst.Listen = src.Listen },
		form:    `"IP:PORT"`,
	}
}

// vipProtocol is tcp or udp; [defaults] cannot set it.
func vipProtocol() keyValue[VIP] {
	names := []string{"tcp", "udp"}
	return keyValue[VIP]{
		resolve: func(l *layer, key string, own, _ rawTable, v *VIP) {
			v.Protocol = parsed(l, key, get[string](own, key), opt[string]{}, l4.TCP, parseProtocol, names)
		},
		text: func(v *VIP) string { return v.Protocol.String() },
		toml: func(v *VIP) string { return quoteTOML(v.Protocol.String()) },
		copy: func(dst, src *VIP) { dst.Protocol = src.Protocol },
		form: `"tcp" | "udp"`,
	}
}

// parseProtocol maps tcp and udp to their protocols.
func parseProtocol(s string) (l4.Protocol, bool) {
	p, err := l4.ParseProtocol(s)
	return p, err == nil
}
