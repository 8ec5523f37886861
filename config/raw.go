// Raw decoding structs: the file's shape, with every value kept untyped.

package config

// opt is one raw TOML value. It records whether the key was present at all
// (so "set to 0" differs from "not set") and keeps a value of the wrong type
// instead of failing, so that the type error is reported with its key path
// and line alongside every other problem rather than ending the decode.
type opt[T any] struct {
	val T
	set bool
	bad any // the value, when it was not a T
}

// UnmarshalTOML implements toml.Unmarshaler. An integer is accepted where
// a float is expected.
func (o *opt[T]) UnmarshalTOML(data any) error {
	o.set = true
	if v, ok := data.(T); ok {
		o.val = v
		return nil
	}
	if i, ok := data.(int64); ok {
		if f, ok := any(&o.val).(*float64); ok {
			*f = float64(i)
			return nil
		}
	}
	o.bad = data
	return nil
}

type rawFile struct {
	Global   rawGlobal `toml:"global"`
	Defaults rawTuning `toml:"defaults"`
	VIPs     []rawVIP  `toml:"vip"`
	XDP      *rawXDP   `toml:"xdp"`
	BGP      *rawBGP   `toml:"bgp"`
}

type rawGlobal struct {
	LogLevel      opt[string] `toml:"log_level"`
	LogFormat     opt[string] `toml:"log_format"`
	AdminSocket   opt[string] `toml:"admin_socket"`
	MetricsListen opt[string] `toml:"metrics_listen"`
	DrainTimeout  opt[string] `toml:"drain_timeout"`
	PipeSize      opt[int64]  `toml:"pipe_size"`
	MaxPipes      opt[int64]  `toml:"max_pipes"`
	Workers       opt[int64]  `toml:"workers"`
	DropCaps      opt[bool]   `toml:"drop_capabilities"`
	BusyPoll      opt[string] `toml:"busy_poll"`
	Resolvers     opt[[]any]  `toml:"resolvers"`
	ResolveMin    opt[string] `toml:"resolve_min"`
	ResolveMax    opt[string] `toml:"resolve_max"`
}

// rawTuning is every VIP key that [defaults] may also set.
type rawTuning struct {
	Mode              opt[string]  `toml:"mode"`
	Algorithm         opt[string]  `toml:"algorithm"`
	HashKey           opt[string]  `toml:"hash_key"`
	HashBalanceFactor opt[int64]   `toml:"hash_balance_factor"`
	MaglevTableSize   opt[int64]   `toml:"maglev_table_size"`
	LeastTimeDefault  opt[string]  `toml:"least_time_default"`
	LeastTimeBias     opt[string]  `toml:"least_time_bias"`
	LeastTimeAlpha    opt[float64] `toml:"least_time_alpha"`
	LeastTimeMetric   opt[string]  `toml:"least_time_metric"`
	ConnectTimeout    opt[string]  `toml:"connect_timeout"`
	Retries           opt[int64]   `toml:"retries"`
	IdleTimeout       opt[string]  `toml:"idle_timeout"`
	KeepAlive         opt[string]  `toml:"keepalive"`
	MaxConns          opt[int64]   `toml:"max_conns"`
	Freebind          opt[bool]    `toml:"freebind"`
	DeferAccept       opt[bool]    `toml:"defer_accept"`
	Announce          opt[bool]    `toml:"announce"`
	FirstByteTimeout  opt[string]  `toml:"first_byte_timeout"`
	QueueTimeout      opt[string]  `toml:"queue_timeout"`
	SNITimeout        opt[string]  `toml:"sni_timeout"`
	SNINoMatch        opt[string]  `toml:"sni_no_match"`
	ProxyProtocol     opt[string]  `toml:"proxy_protocol"`
	AcceptProxy       opt[string]  `toml:"accept_proxy_protocol"`
	AcceptProxyFrom   opt[[]any]   `toml:"accept_proxy_protocol_from"`
	AffinityTimeout   opt[string]  `toml:"affinity_timeout"`
	RebalanceRate     opt[int64]   `toml:"rebalance_rate"`
	SessionTimeout    opt[string]  `toml:"session_timeout"`
	MaxSessions       opt[int64]   `toml:"max_sessions"`
	UDPResponses      opt[int64]   `toml:"udp_responses"`
	BackupMode        opt[string]  `toml:"backup_mode"`
	Forward           opt[string]  `toml:"forward"`

	// Access control and per-client limits.
	Allow                opt[[]any] `toml:"allow"`
	Deny                 opt[[]any] `toml:"deny"`
	MaxConnsPerClient    opt[int64] `toml:"max_conns_per_client"`
	ConnRatePerClient    opt[int64] `toml:"conn_rate_per_client"`
	MaxSessionsPerClient opt[int64] `toml:"max_sessions_per_client"`
	NewFlowRate          opt[int64] `toml:"new_flow_rate"`
	Health               rawHealth  `toml:"health"`

	// The per-connection log.
	LogConnections     opt[bool]  `toml:"log_connections"`
	LogConnectionsRate opt[int64] `toml:"log_connections_rate"`
}

type rawVIP struct {
	Name     opt[string] `toml:"name"`
	Listen   opt[string] `toml:"listen"`
	Protocol opt[string] `toml:"protocol"`
	rawTuning
	Backends []rawBackend `toml:"backend"`
	Routes   []rawRoute   `toml:"route"`
}

type rawRoute struct {
	Name      opt[string]  `toml:"name"`
	Names     opt[[]any]   `toml:"names"`
	Algorithm opt[string]  `toml:"algorithm"`
	Health    rawHealth    `toml:"health"`
	Backends  []rawBackend `toml:"backend"`
}

type rawHealth struct {
	Type        opt[string] `toml:"type"`
	Interval    opt[string] `toml:"interval"`
	Timeout     opt[string] `toml:"timeout"`
	Rise        opt[int64]  `toml:"rise"`
	Fall        opt[int64]  `toml:"fall"`
	Port        opt[int64]  `toml:"port"`
	MaxFails    opt[int64]  `toml:"max_fails"`
	FailTimeout opt[string] `toml:"fail_timeout"`
	SlowStart   opt[string] `toml:"slow_start"`
	OnDown      opt[string] `toml:"on_down"`
	SendProxy   opt[bool]   `toml:"send_proxy"`
	Send        opt[string] `toml:"send"`
	SendHex     opt[string] `toml:"send_hex"`
	Expect      opt[string] `toml:"expect"`
	ExpectHex   opt[string] `toml:"expect_hex"`
	ExpectRegex opt[string] `toml:"expect_regex"`
	Path        opt[string] `toml:"path"`
	Host        opt[string] `toml:"host"`
	Status      opt[int64]  `toml:"status"`
	WebSocket   opt[bool]   `toml:"websocket"`
	User        opt[string] `toml:"user"`
	Password    opt[string] `toml:"password"`
	Database    opt[string] `toml:"database"`
	Role        opt[string] `toml:"role"`
}

type rawBackend struct {
	Name    opt[string] `toml:"name"`
	Address opt[string] `toml:"address"`
	SRV     opt[string] `toml:"srv"`
	Weight  opt[int64]  `toml:"weight"`
	Backup  opt[bool]   `toml:"backup"`
	// Per-backend caps on live flows (proxy mode).
	MaxConns    opt[int64] `toml:"max_conns"`
	MaxSessions opt[int64] `toml:"max_sessions"`
}

type rawXDP struct {
	Interface     opt[string] `toml:"interface"`
	Attach        opt[string] `toml:"attach"`
	PinPath       opt[string] `toml:"pin_path"`
	ConntrackSize opt[int64]  `toml:"conntrack_size"`
	WeightRefresh opt[string] `toml:"weight_refresh"`
	SYNRate       opt[int64]  `toml:"syn_rate_per_source"`
}

type rawBGP struct {
	ASN           opt[int64]   `toml:"asn"`
	RouterID      opt[string]  `toml:"router_id"`
	NextHop       opt[string]  `toml:"next_hop"`
	Communities   opt[[]any]   `toml:"communities"`
	HoldTime      opt[string]  `toml:"hold_time"`
	ConnectRetry  opt[string]  `toml:"connect_retry"`
	ShutdownGrace opt[string]  `toml:"shutdown_grace"`
	Peers         []rawBGPPeer `toml:"peer"`
}

type rawBGPPeer struct {
	Address  opt[string] `toml:"address"`
	ASN      opt[int64]  `toml:"asn"`
	Password opt[string] `toml:"password"`
	HoldTime opt[string] `toml:"hold_time"`
	Port     opt[int64]  `toml:"port"`
}
