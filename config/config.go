package config

import (
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Config is a whole validated file.
type Config struct {
	Path   string
	Global Global
	VIPs   []VIP
	// XDP is set only when the file has an [xdp] table.
	XDP *XDP
	// BGP is set only when the file has a [bgp] table.
	BGP *BGP
	// FlowSync is set only when the file has a [flow_sync] table.
	FlowSync *FlowSync
	// Warnings are what the file allows but is probably wrong (a VIP whose
	// weights are all 0, say): `l4lb check` prints them, run logs them.
	Warnings []Problem

	lines *lineIndex // where each key is, for problems found later (CheckHost)
}

// KeyLine is the line of a key path (such as "xdp.pin_path") in the
// file, or of the nearest table above it; 0 when unknown. For problems
// found outside this package (host checks).
func (c *Config) KeyLine(key string) int { return c.lines.line(key) }

// VIP returns the VIP called name, or nil.
func (c *Config) VIP(name string) *VIP {
	for i := range c.VIPs {
		if c.VIPs[i].Name == name {
			return &c.VIPs[i]
		}
	}
	return nil
}

// Global holds process-wide settings ([global]).
type Global struct {
	LogLevel  l4.LogLevel  // debug | info | warn | error; default info
	LogFormat l4.LogFormat // console | json; default console
	// AdminSocket is the Unix socket of the admin/status API: an absolute
	// path, default /run/l4lb/admin.sock. The file value "off" disables the
	// API and reads here as "".
	AdminSocket string
	// StateFile is where run-time backend changes, overrides and health
	// are kept across a restart ([global] state_file); "" = none.
	StateFile string
	// MetricsListen is host:port for Prometheus metrics; "" = off (default).
	MetricsListen string
	// DrainTimeout bounds how long shutdown and removed VIPs wait for
	// connections to finish; default 30s; range 0..1h.
	DrainTimeout time.Duration
	// PipeSize is the size in bytes of each splice pipe; default 1 MiB;
	// range 4096..16 MiB, rounded up to a power of two by the kernel.
	PipeSize int
	// MaxPipes caps the splice pipes open at once (each holds up to
	// PipeSize bytes of kernel memory and two descriptors); a connection
	// that finds none free copies through a user-space buffer instead.
	// 0 (default) = half the connection limit derived from the open-file
	// limit, which keeps sockets and pipes within it.
	MaxPipes int
	// Workers is the number of event loops (threads) that run proxied
	// TCP connections; 0 (default) = one per CPU the process may use
	// (GOMAXPROCS); range 0..1024. Read at start only.
	Workers int
	// DropCapabilities: once the VIPs listen and the XDP program is
	// attached, drop every capability the daemon does not use afterwards
	// (from every thread and the bounding set); default false (docs/operations.md,
	// "Privileges"). Read at start only: a dropped capability cannot come
	// back.
	DropCapabilities bool
	// BusyPoll: how long an event loop keeps polling for events
	// (epoll_wait with no timeout) before it sleeps; 0 = never, the
	// default. It trades CPU for latency: on virtual machines a thread
	// that sleeps waits for the hypervisor to wake its vCPU, tens of
	// microseconds per event (HAProxy's busy-polling answers the same).
	BusyPoll time.Duration
	// KernelForwarding: whether established proxied TCP connections are
	// forwarded inside the kernel (sockmap) by default; a VIP may say
	// otherwise (kernel_forwarding).
	KernelForwarding l4.KernelFwd
	// Resolvers are the DNS servers that named backends are looked up
	// at, in order; empty (default) = the nameservers of /etc/resolv.conf.
	// A file value without a port means port 53.
	Resolvers []netip.AddrPort
	// ResolveMin and ResolveMax bound how often a backend name is looked
	// up again: its record's TTL, clamped to [ResolveMin, ResolveMax];
	// failures are retried from ResolveMin, backing off. Defaults 5s
	// (100ms..1h) and 5m (1s..24h); ResolveMin <= ResolveMax.
	ResolveMin time.Duration
	ResolveMax time.Duration
}

// VIP is one virtual service ([[vip]]).
//
// Keys that do not apply to a VIP (udp keys on a tcp VIP, least_time keys
// with another algorithm...) are an error when the VIP sets them itself and
// are ignored when they come from [defaults]; their fields then hold the
// default and mean nothing.
type VIP struct {
	Name     string         // 1..64 of [a-zA-Z0-9_.-], not "." or "..", unique
	Listen   netip.AddrPort // IPv4-mapped IPv6 is stored as IPv4; port != 0
	Protocol l4.Protocol    // tcp | udp; default tcp
	Mode     l4.Mode        // proxy | xdp; default proxy

	// Balancing.
	Algorithm         l4.Algorithm  // round_robin | least_conn | p2c | least_time | source_hash | maglev | random; default round_robin (proxy), maglev (xdp, the only one it supports)
	HashKey           l4.HashKey    // src_ip | src_ip_port | 5tuple; default src_ip (proxy), 5tuple (xdp)
	HashBalanceFactor int           // percent, 0 = off, else 100..1000; default 0; proxy mode only
	MaglevTableSize   int           // prime in 1009..1000003 and >= 100 x backends; default 65537
	LeastTimeDefault  time.Duration // RTT assumed before the first sample; default 1ms; 1us..10s
	// LeastTimeBias is added to every backend's RTT in the least_time score:
	// a per-flow cost independent of distance, so sub-millisecond RTT noise
	// does not dominate and a far backend still gets flows under load.
	// Default 1ms; 0..10s.
	LeastTimeBias   time.Duration
	LeastTimeAlpha  float64      // EWMA weight of a new sample, (0,1]; default 0.3
	LeastTimeMetric l4.RTTMetric // connect | first_byte; default connect

	// TCP proxy behaviour (protocol tcp, mode proxy).
	ConnectTimeout time.Duration   // default 2s; 1ms..5m
	Retries        int             // extra backends tried after a failed connect; 0..15; default 2
	IdleTimeout    time.Duration   // no bytes either way for this long closes the connection; default 1h; 1s..168h
	KeepAlive      time.Duration   // TCP keepalive idle time on both sides; default 60s; 0 = off, else 1s..2h
	MaxConns       int             // 0 = unlimited (default), up to 10M; at the limit the VIP stops accepting (clients wait in the listen backlog); proxy mode, tcp or udp
	ProxyProtocol  l4.ProxyVersion // off | v1 | v2; default off; always off for other VIPs
	// AcceptProxyProtocol (off | v1 | v2 | any; default off) makes every
	// client send a PROXY header first: l4lb runs behind another balancer
	// and keeps the original client address. Only from a network in
	// AcceptProxyProtocolFrom (required when on); within connect_timeout.
	// tcp VIPs in proxy mode only.
	AcceptProxyProtocol     l4.ProxyAccept
	AcceptProxyProtocolFrom []netip.Prefix
	// Freebind binds the listener before its address is on an interface
	// (IP_FREEBIND), for keepalived or a BGP speaker that adds it later;
	// default false: a VIP whose address no interface has fails to start.
	// Proxy mode only.
	Freebind bool
	// DeferAccept (TCP_DEFER_ACCEPT) hands a connection to l4lb only once
	// the client has sent data, so a client that connects and says
	// nothing costs no backend connection; default false. Unsafe for
	// server-speaks-first protocols (MySQL, SMTP, FTP): their clients wait
	// about a second, until the kernel accepts anyway, before the backend
	// is even contacted. Only for tcp VIPs in proxy mode.
	DeferAccept bool
	// Announce: with [bgp], the VIP's address is announced while the VIP
	// has an eligible backend; false opts the VIP out (its address is
	// still announced for another VIP on it that announces). Default true.
	Announce bool
	// FirstByteTimeout > 0 closes a client that sends nothing for this
	// long after connecting, before any backend is dialed (counted as
	// first_byte_timeouts); default 0 = off; 1ms..1h. For client-speaks-
	// first protocols (HTTP, TLS, Redis, PostgreSQL) only: with MySQL or
	// SMTP the client waits for the server's greeting and would be cut.
	// Only for tcp VIPs in proxy mode.
	FirstByteTimeout time.Duration
	// StallTimeout > 0 watches the VIP's proxied connections: a backend
	// whose connections stall (a request waits with no byte back for this
	// long, and no connection to it got a byte back since it was sent) is
	// degraded, out of new picks, until a byte comes back (stall_timeout);
	// default 0 = off; 100ms..1h. Only for tcp VIPs in proxy mode.
	StallTimeout time.Duration
	// CapacityGuard makes drain and disable refuse to leave the VIP no
	// eligible backend or too little room (capacity_guard).
	CapacityGuard bool
	// AppProtocol is the application protocol the VIP carries, whose
	// framing l4lb may read as bytes pass (app_protocol).
	AppProtocol l4.AppProtocol
	// KernelForwarding is the VIP's kernel_forwarding, resolved at load:
	// a VIP that says global (the default) holds [global]'s value, so a
	// change there is a change of each such VIP.
	KernelForwarding l4.KernelFwd
	// QueueTimeout is how long a new connection waits when every backend
	// is at its max_conns ([[vip.backend]]): it holds its VIP max_conns
	// slot, is served in arrival order when a backend frees a slot, and
	// is reset and counted (queue_timeouts) when the time is up. Default
	// 5s; 0 = no wait: reset at once; up to 1h. Only for tcp VIPs in
	// proxy mode.
	QueueTimeout time.Duration
	// FailoverHold: a new connection that finds no eligible backend (or
	// whose connects failed on every backend) waits this long, nothing
	// dialed, and goes in arrival order to the first backend that becomes
	// eligible; then it is reset as without it (failover_hold). 0 = off
	// (the default), up to 10m. Only for tcp VIPs in proxy mode.
	FailoverHold time.Duration
	// SNITimeout bounds the wait for a client's whole TLS ClientHello on a
	// VIP with Routes (it stands for first_byte_timeout there): a client
	// that has not sent one by then is reset, no backend dialed, counted
	// as sni_timeouts; default 5s; 1ms..5m.
	SNITimeout time.Duration
	// SNINoMatch says where a connection goes when no route takes it (a
	// name no route lists, no name, not TLS or a malformed hello):
	// "default" (the VIP's own backends; the default) or "close" (reset,
	// no backend dialed). Counted either way (sni_no_match, sni_not_tls).
	SNINoMatch l4.SNINoMatch
	// AffinityTimeout > 0 keeps a client address on its last backend for
	// this long; default 0; up to 24h.
	AffinityTimeout time.Duration
	// RebalanceRate is how many connections per second `l4lb rebalance`
	// closes on this VIP (the command's --rate overrides it); default 10;
	// 0 = rebalancing refused for this VIP; up to MaxRebalanceRate.
	RebalanceRate int

	// UDP.
	SessionTimeout time.Duration // default 30s; 1s..1h
	MaxSessions    int           // default 65536; 1..16Mi
	UDPResponses   int           // close a session after this many replies; 0 = unlimited (default), up to 65535; proxy mode only

	// XDP.
	Forward l4.Forward // ipip | l2 | nat (xdp mode only); default ipip
	// NewFlowRate caps the new flows per second an xdp VIP enters into the
	// BPF conntrack (0 = no cap, the default; up to 100M). Above it a new
	// flow is still forwarded by the VIP's Maglev table, only not tracked,
	// so spoofed sources cannot flush established flows out of the LRU
	// (Katran's choice). xdp VIPs only.
	NewFlowRate int

	// Access control (every VIP, also in [defaults]): networks allowed and
	// denied as client sources. The most specific network that contains
	// the client's address decides; a client in neither list is allowed
	// when Allow is empty, refused otherwise. The same network in both
	// lists is an error. Refused: a TCP connection is closed at once (a
	// reset), a datagram dropped, before any backend is chosen.
	Allow []netip.Prefix
	Deny  []netip.Prefix
	// Per-client limits, by client address (proxy mode; 0 = off, the
	// default). MaxConnsPerClient: open TCP connections; ConnRatePerClient:
	// new TCP connections or UDP sessions a second (a token bucket holding
	// one second's worth); MaxSessionsPerClient: open UDP sessions. Over a
	// limit a TCP connection is reset at once, a datagram that would start
	// a session dropped; both counted.
	MaxConnsPerClient    int
	ConnRatePerClient    int
	MaxSessionsPerClient int

	// LogConnections writes one info line when a connection or UDP
	// session ends (client, backend, times, bytes, why it ended); default
	// false; proxy mode only (the kernel forwards an xdp VIP's flows). A
	// reload applies it to new connections.
	LogConnections bool
	// LogConnectionsRate caps those lines per second for the VIP; lines
	// over it are counted and summed up in one warning a second; default
	// 1000; 0 = no cap; up to 1000000.
	LogConnectionsRate int

	// BackupMode says which backup backends serve when no primary is
	// eligible: "first" (the first eligible one in file order, HAProxy's
	// default) or "all" (HAProxy `option allbackups`, nginx); default
	// "first".
	BackupMode l4.BackupMode
	// OnBackupRecovered is what happens to the backups' established
	// connections when new flows go back to the primaries: keep (default),
	// close (reset), graceful (FIN at a boundary). Proxy mode.
	OnBackupRecovered l4.OnBackupRecovered
	// RetryOnReset says when a connection whose backend accepted and then
	// reset or closed before answering is retried on another backend
	// (under Retries): off, unsent (default), unanswered. TCP proxy VIPs.
	RetryOnReset l4.RetryOnReset

	Health   Health
	Backends []Backend
	// Routes are the VIP's SNI routes ([[vip.route]], tcp VIPs in proxy
	// mode); Backends is then the default route.
	Routes []Route

	// Line is where the VIP's [[vip]] header is in the file.
	Line int
}

// Health is a VIP's health check ([vip.health], defaults from [defaults.health]).
//
// The keys of one check type (send/expect, http, database) are zero for
// other types. Send and its hex form are one setting, as are the three
// expect keys: a VIP that sets one replaces all of them from [defaults].
type Health struct {
	Type     l4.CheckType  // none | tcp | send_expect | postgres | mysql | redis | http; default tcp (udp VIPs: none)
	Interval time.Duration // default 2s; 100ms..1h
	Timeout  time.Duration // default 1s; 1ms..1h and <= interval
	Rise     int           // default 2; 1..100
	Fall     int           // default 3; 1..100
	Port     int           // 0 = the backend's own port (default); 0..65535
	// Passive marks: a connect failure seen by the proxy counts toward Fall.
	// MaxFails failures within FailTimeout mark the backend down (nginx
	// semantics); 0 disables passive marks. Defaults 1 (0..100) and 10s
	// (1s..1h).
	MaxFails    int
	FailTimeout time.Duration
	SlowStart   time.Duration // ramp the weight over this after recovery; 0 = off (default); up to 1h
	OnDown      l4.OnDown     // keep | reset | graceful; default keep
	// MaxEjected caps, in percent of the VIP's backends (rounded down, at
	// least one unless 0), how many passive marks take out at once
	// (Envoy's max_ejection_percent); default 50; 0..100 (100 = no cap).
	MaxEjected int
	// PanicMode: when health would leave the VIP no backend for new
	// flows, the backends down by health take them anyway (Envoy's panic
	// routing); default false (down means down, as in HAProxy).
	PanicMode bool
	// SendProxy is the PROXY protocol header every check connection
	// starts with (HAProxy's check-send-proxy): off, v1 or v2, the VIP's
	// proxy_protocol version. The file's send_proxy (true or false)
	// defaults to true when the VIP sends the header and the checks go to
	// the backend's own port (port = 0), as HAProxy's checks do: a backend
	// that requires the header for traffic requires it for checks too.
	// Always off for type none.
	SendProxy l4.ProxyVersion

	// send_expect: at least one of Send, Expect, ExpectRegex not empty; each at most 4096 bytes.
	Send        []byte // from send (string) or send_hex (hex, spaces allowed); not both
	Expect      []byte // prefix the reply must start with (expect / expect_hex)
	ExpectRegex string // alternatively (RE2 syntax), a regular expression the reply must match

	// http
	Path   string // default "/"; starts with /, no spaces or control characters
	Host   string // Host header; "" (default) = the backend address
	Status int    // default 200, or 101 with WebSocket; 100..599
	// WebSocket sends an Upgrade: websocket request (expect Status 101).
	WebSocket bool

	// postgres / mysql / redis (Database: postgres and mysql); no NUL bytes
	User     string
	Password string
	Database string
	Role     l4.DBRole // any | primary | replica; default any (postgres and mysql only; other than any needs User)
	// Replica lag (postgres and mysql with Role replica): MaxLag takes a
	// replica whose lag is above it (or unknown) out; LagWeight, below
	// MaxLag, scales its weight down from there. 0 = off.
	MaxLag    time.Duration
	LagWeight time.Duration

	// udp: Send (required), Expect or ExpectRegex as for send_expect, in
	// one datagram each way. dns: a query for DNSName (a DNS name, lower
	// case without the trailing dot) of type DNSType, answered NOERROR.
	DNSName string
	DNSType l4.DNSType
	// tls: the ClientHello's server name ("" = none; a route's check
	// defaults to its first exact server name), and whether the
	// certificate is verified against the system's roots and that name.
	TLSServerName string
	TLSVerify     bool

	// Agent check (HAProxy agent-check), beside any type: AgentPort 0 =
	// off. AgentInterval and AgentTimeout default to Interval and
	// Timeout; AgentSend is written on connect (at most 1024 bytes).
	AgentPort     int
	AgentInterval time.Duration
	AgentTimeout  time.Duration
	AgentSend     []byte
}

// Backend is one backend of a VIP ([[vip.backend]]).
type Backend struct {
	// Name is optional; the backend's identity is Name or, when empty, Address.
	// Names follow the VIP name rule; identities and addresses are unique
	// within a VIP.
	Name    string
	Address netip.AddrPort // IPv4-mapped IPv6 is stored as IPv4; not unspecified; in xdp mode its port is the VIP's
	// A named backend has no Address: it stands for the addresses a DNS
	// name has (the reconciler looks them up and expands it into one
	// backend per address). Host and Port come from address = "name:port"
	// (A and AAAA records; in xdp mode Port is the VIP's), SRV from
	// srv = "_service._proto.domain" (targets and ports from the SRV
	// records; proxy mode only). Names are stored lower case without the
	// trailing dot.
	Host   string
	Port   uint16
	SRV    string
	Weight int // 0..1000, default 100; 0 = no new flows (drain)
	// Backup: the backend takes new flows only while no primary (non-
	// backup) backend of the VIP is eligible (HAProxy and nginx `backup`);
	// VIP.BackupMode says whether the first eligible backup or all of them
	// take over. Default false.
	Backup bool
	// MaxConns caps the backend's open connections (tcp VIPs in proxy
	// mode) and MaxSessions its UDP sessions (udp VIPs in proxy mode); 0 =
	// no cap (the default), up to 10M. A backend at its cap is skipped by
	// every algorithm; a new connection that finds every backend full
	// waits up to the VIP's queue_timeout, a new UDP session is dropped.
	// A reload changes a cap for new flows without cutting any.
	MaxConns    int
	MaxSessions int
	// MaxConnRate caps the new connections a second to the backend (tcp
	// VIPs in proxy mode; max_conn_rate), a token bucket with a burst of a
	// tenth of a second's worth: over it the backend is skipped as if at
	// its cap, and connections wait in the queue for a token. 0 = none
	// (the default), up to 10M.
	MaxConnRate int
	// Line is where the backend is defined in the file ([[vip.backend]]
	// header or inline table); 0 if unknown.
	Line int
}

// AttachesXDP reports whether l4lb loads and attaches the XDP program for
// c: for its xdp VIPs or, with an [xdp] table, to guard proxy VIPs
// (syn_rate_per_source, or allow/deny on a VIP the program can match).
func (c *Config) AttachesXDP() bool {
	if c.HasXDPVIP() {
		return true
	}
	if c.XDP == nil {
		return false
	}
	if c.XDP.SYNRatePerSource > 0 {
		return true
	}
	for i := range c.VIPs {
		if v := &c.VIPs[i]; len(v.Allow)+len(v.Deny) > 0 && v.XDPGuardable() {
			return true
		}
	}
	return false
}

// XDPGuardable reports whether the XDP program can match a proxy VIP's
// packets to guard it: only a concrete listen address (a wildcard matches
// every destination, which the program's exact lookup cannot express).
func (v *VIP) XDPGuardable() bool {
	a := v.Listen.Addr()
	return a.IsValid() && !a.IsUnspecified()
}

// Key is what identifies the VIP to the kernel: its listen address and protocol.
func (v *VIP) Key() l4.VIPKey { return l4.VIPKey{Addr: v.Listen, Proto: v.Protocol} }

// ID returns the backend's stable identity: its name, its address, or
// for a named backend what it looks up (name:port or the SRV name).
func (b Backend) ID() string {
	switch {
	case b.Name != "":
		return b.Name
	case b.IsNamed():
		return b.Lookup()
	}
	return b.Address.String()
}

// XDP holds fast-path settings ([xdp]).
type XDP struct {
	// Interfaces are the interfaces the program attaches to (required; at
	// least one Linux interface name, no repeats); Interface is the
	// first, whose addresses are the outer sources.
	Interfaces []string
	Interface  string
	Attach     l4.AttachMode // driver | generic; default driver
	PinPath    string        // absolute path, or "" (default) = maps are not pinned
	// ConntrackSize is the flow table's capacity in flows (an LRU: the
	// least recently seen flow makes room); default 1048576, about 120
	// bytes of kernel memory each; 1024..67108864.
	ConntrackSize int
	// WeightRefresh is how often least_conn and least_time VIPs turn live
	// flows and RTTs into Maglev weights; default 5s; 1s..1h.
	WeightRefresh time.Duration
	// SYNRatePerSource drops, in the XDP program, TCP SYNs to any VIP
	// (proxy VIPs included: the program sees their packets first) from a
	// source address above this many a second; 0 = off (the default);
	// up to 10M. The count is approximate (one shared LRU of sources).
	SYNRatePerSource int
	// SourcePrefix4 and SourcePrefix6, when valid, are the networks the
	// outer sources of encapsulated flows come from (one address per
	// flow, by its hash); IPv6 /64 or longer. Zero: the interface's own
	// address.
	SourcePrefix4, SourcePrefix6 netip.Prefix
	// GUEPort is the UDP destination port of forward = "gue"; default
	// 6080 (Katran's).
	GUEPort int
	// NATSource4 and NATSource6 are the source addresses forward = "nat"
	// VIPs give their flows towards the backends (the balancer's own);
	// the zero Addr (the default) means the interface's primary address
	// of that family, found when the program starts.
	NATSource4, NATSource6 netip.Addr
	// NATPortMin..NATPortMax are the source ports of NAT flows, each held
	// by one flow per backend address and port at a time; default
	// 1024..32767 (below Linux's ephemeral range).
	NATPortMin, NATPortMax uint16
	// NATTCPTimeout and NATUDPTimeout are how long a NAT mapping may idle
	// before a new flow may take its port; defaults 3h and 30s.
	NATTCPTimeout, NATUDPTimeout time.Duration
}

// MaxRebalanceRate bounds rebalance_rate and `l4lb rebalance --rate`
// (connections closed a second): a rebalance moves clients gradually, so
// that their reconnections do not arrive all at once.
const MaxRebalanceRate = 10000

// HasXDPVIP reports whether some VIP has mode = "xdp".
func (c *Config) HasXDPVIP() bool {
	for i := range c.VIPs {
		if c.VIPs[i].Mode == l4.ModeXDP {
			return true
		}
	}
	return false
}
