// Checks that span several keys of a VIP: which keys apply, Maglev, XDP.

package config

import (
	"fmt"

	"github.com/l4lb/l4lb/l4"
)

// vipScope says which VIPs a key applies to.
type vipScope struct {
	key     string
	applies func(v *VIP) bool
	msg     string
}

// vipScopes lists the keys that only apply to some VIPs. A VIP that sets
// one itself where it does not apply is an error; a value from [defaults]
// is ignored there, so one [defaults] table can serve tcp and udp VIPs.
var vipScopes = []vipScope{
	{"hash_key", isHashing, "applies only to algorithm source_hash or maglev"},
	{"hash_balance_factor", func(v *VIP) bool { return isHashing(v) && v.Mode == l4.ModeProxy }, "applies only to algorithm source_hash or maglev in proxy mode"},
	{"maglev_table_size", func(v *VIP) bool { return v.Algorithm == l4.Maglev }, "applies only to algorithm maglev"},
	{"least_time_default", isLeastTime, "applies only to algorithm least_time"},
	{"least_time_bias", isLeastTime, "applies only to algorithm least_time"},
	{"least_time_alpha", isLeastTime, "applies only to algorithm least_time"},
	{"least_time_metric", isLeastTime, "applies only to algorithm least_time"},
	{"connect_timeout", isTCPProxy, "applies only to tcp VIPs in proxy mode"},
	{"retries", isTCPProxy, "applies only to tcp VIPs in proxy mode"},
	{"idle_timeout", isTCPProxy, "applies only to tcp VIPs in proxy mode"},
	{"keepalive", isTCPProxy, "applies only to tcp VIPs in proxy mode"},
	{"defer_accept", isTCPProxy, "applies only to tcp VIPs in proxy mode"},
	{"first_byte_timeout", isTCPProxy, "applies only to tcp VIPs in proxy mode"},
	{"queue_timeout", isTCPProxy, "applies only to tcp VIPs in proxy mode (it is how long a connection waits when every backend is at its max_conns)"},
	{"sni_timeout", hasRoutes, "applies only to VIPs with [[vip.route]] tables (SNI routing)"},
	{"sni_no_match", hasRoutes, "applies only to VIPs with [[vip.route]] tables (SNI routing)"},
	{"affinity_timeout", isTCPProxy, "applies only to tcp VIPs in proxy mode"},
	{"rebalance_rate", isTCPProxy, "applies only to tcp VIPs in proxy mode (l4lb rebalance closes proxied connections)"},
	{"proxy_protocol", func(v *VIP) bool { return isTCPProxy(v) || v.ProxyProtocol == l4.ProxyOff }, "applies only to tcp VIPs in proxy mode"},
	{"accept_proxy_protocol", func(v *VIP) bool { return isTCPProxy(v) || v.AcceptProxyProtocol == l4.AcceptProxyOff }, "applies only to tcp VIPs in proxy mode"},
	{"accept_proxy_protocol_from", func(v *VIP) bool { return isTCPProxy(v) && v.AcceptProxyProtocol != l4.AcceptProxyOff }, "applies only with accept_proxy_protocol on (tcp VIPs in proxy mode)"},
	{"max_conns", isTCPProxy, "applies only to tcp VIPs in proxy mode (udp VIPs: max_sessions)"},
	{"session_timeout", func(v *VIP) bool { return v.Protocol == l4.UDP }, "applies only to udp VIPs"},
	{"max_sessions", func(v *VIP) bool { return v.Protocol == l4.UDP && v.Mode == l4.ModeProxy }, "applies only to udp VIPs in proxy mode"},
	{"udp_responses", func(v *VIP) bool { return v.Protocol == l4.UDP && v.Mode == l4.ModeProxy }, "applies only to udp VIPs in proxy mode (in xdp mode replies bypass l4lb)"},
	{"forward", func(v *VIP) bool { return v.Mode == l4.ModeXDP }, "applies only to mode xdp"},
	{"freebind", func(v *VIP) bool { return v.Mode == l4.ModeProxy }, "applies only to mode proxy (an xdp VIP binds no socket)"},
	{"new_flow_rate", func(v *VIP) bool { return v.Mode == l4.ModeXDP }, "applies only to mode xdp (the BPF conntrack)"},
	{"max_conns_per_client", isTCPProxy, "applies only to tcp VIPs in proxy mode (udp VIPs: max_sessions_per_client)"},
	{"conn_rate_per_client", isProxy, "is not supported in mode xdp (use [xdp] syn_rate_per_source)"},
	{"max_sessions_per_client", func(v *VIP) bool { return v.Protocol == l4.UDP && v.Mode == l4.ModeProxy }, "applies only to udp VIPs in proxy mode (tcp VIPs: max_conns_per_client)"},
	{"log_connections", isProxy, "is not supported in mode xdp: the kernel forwards an xdp VIP's flows, so l4lb never sees them end"},
	{"log_connections_rate", isProxy, "is not supported in mode xdp: the kernel forwards an xdp VIP's flows, so l4lb never sees them end"},
}

func isHashing(v *VIP) bool   { return v.Algorithm.Hashing() }
func isLeastTime(v *VIP) bool { return v.Algorithm == l4.LeastTime }
func isTCPProxy(v *VIP) bool  { return v.Protocol == l4.TCP && v.Mode == l4.ModeProxy }
func isProxy(v *VIP) bool     { return v.Mode == l4.ModeProxy }

// sentProxyProtocol is the PROXY header version v sends its backends:
// proxy_protocol where it applies (checkScopes turns it off elsewhere).
func sentProxyProtocol(v *VIP) l4.ProxyVersion {
	if !isTCPProxy(v) {
		return l4.ProxyOff
	}
	return v.ProxyProtocol
}
func hasRoutes(v *VIP) bool { return len(v.Routes) > 0 }

// checkScopes reports keys the VIP sets where they do not apply, and gives
// every key that does not apply its built-in value, so that a Config holds
// nothing that means nothing (a [defaults] value a VIP ignores would
// otherwise look like a change on reload).
func checkScopes(l *layer, v *VIP) {
	builtin := builtinVIP(v.Mode)
	for _, s := range vipScopes {
		if s.applies(v) {
			continue
		}
		if l.ownSet(s.key) {
			l.problem(s.key, "%s", s.msg)
		}
		resetKey(s.key, v, &builtin)
	}
	if !isTCPProxy(v) {
		v.ProxyProtocol = l4.ProxyOff
		v.AcceptProxyProtocol = l4.AcceptProxyOff
	}
	if v.AcceptProxyProtocol != l4.AcceptProxyOff && len(v.AcceptProxyProtocolFrom) == 0 && !l.failed["accept_proxy_protocol_from"] {
		l.problem("accept_proxy_protocol", "%q needs accept_proxy_protocol_from: the networks of the balancers in front, such as [\"198.18.0.0/15\"] (a header from anywhere else is refused)", v.AcceptProxyProtocol)
	}
}

// builtinVIP is a VIP of the given mode with every built-in default.
func builtinVIP(mode l4.Mode) VIP {
	var none rawTuning
	raw := rawTuning{Mode: opt[string]{val: mode.String(), set: true}}
	l := newLayer(newProblems("", nil), "", "builtin", "")
	var v VIP
	vipBalancing(l, &raw, &none, &v)
	vipTraffic(l, &raw, &none, &v)
	return v
}

// resetKey copies key's field from def into v.
func resetKey(key string, v, def *VIP) {
	switch key {
	case "hash_key":
		v.HashKey = def.HashKey
	case "hash_balance_factor":
		v.HashBalanceFactor = def.HashBalanceFactor
	case "maglev_table_size":
		v.MaglevTableSize = def.MaglevTableSize
	case "least_time_default":
		v.LeastTimeDefault = def.LeastTimeDefault
	case "least_time_bias":
		v.LeastTimeBias = def.LeastTimeBias
	case "least_time_alpha":
		v.LeastTimeAlpha = def.LeastTimeAlpha
	case "least_time_metric":
		v.LeastTimeMetric = def.LeastTimeMetric
	case "connect_timeout":
		v.ConnectTimeout = def.ConnectTimeout
	case "retries":
		v.Retries = def.Retries
	case "idle_timeout":
		v.IdleTimeout = def.IdleTimeout
	case "keepalive":
		v.KeepAlive = def.KeepAlive
	case "defer_accept":
		v.DeferAccept = def.DeferAccept
	case "first_byte_timeout":
		v.FirstByteTimeout = def.FirstByteTimeout
	case "queue_timeout":
		v.QueueTimeout = def.QueueTimeout
	case "sni_timeout":
		v.SNITimeout = def.SNITimeout
	case "sni_no_match":
		v.SNINoMatch = def.SNINoMatch
	case "affinity_timeout":
		v.AffinityTimeout = def.AffinityTimeout
	case "rebalance_rate":
		v.RebalanceRate = def.RebalanceRate
	case "proxy_protocol":
		v.ProxyProtocol = def.ProxyProtocol
	case "accept_proxy_protocol":
		v.AcceptProxyProtocol = def.AcceptProxyProtocol
	case "accept_proxy_protocol_from":
		v.AcceptProxyProtocolFrom = def.AcceptProxyProtocolFrom
	case "max_conns":
		v.MaxConns = def.MaxConns
	case "session_timeout":
		v.SessionTimeout = def.SessionTimeout
	case "max_sessions":
		v.MaxSessions = def.MaxSessions
	case "udp_responses":
		v.UDPResponses = def.UDPResponses
	case "forward":
		v.Forward = def.Forward
	case "freebind":
		v.Freebind = def.Freebind
	case "new_flow_rate":
		v.NewFlowRate = def.NewFlowRate
	case "max_conns_per_client":
		v.MaxConnsPerClient = def.MaxConnsPerClient
	case "conn_rate_per_client":
		v.ConnRatePerClient = def.ConnRatePerClient
	case "max_sessions_per_client":
		v.MaxSessionsPerClient = def.MaxSessionsPerClient
	case "log_connections":
		v.LogConnections = def.LogConnections
	case "log_connections_rate":
		v.LogConnectionsRate = def.LogConnectionsRate
	default:
		panic("config: resetKey: no field for " + key) // a vipScopes entry without a case here
	}
}

// checkBackendCaps reports a backend cap where it does not apply: caps
// count the flows the proxy holds, so xdp VIPs (the kernel forwards, l4lb
// never sees a flow end) have none, and each protocol has its own key.
func checkBackendCaps(l *layer, v *VIP) {
	for j, b := range v.Backends {
		switch {
		case v.Mode == l4.ModeXDP && (b.MaxConns > 0 || b.MaxSessions > 0):
			key := "max_conns"
			if b.MaxConns == 0 {
				key = "max_sessions"
			}
			l.p.add(l.vip, l.backendKey(j, key), "per-backend caps do not apply in mode xdp: the kernel forwards an xdp VIP's flows, so l4lb cannot count them")
		case v.Protocol == l4.UDP && b.MaxConns > 0:
			l.p.add(l.vip, l.backendKey(j, "max_conns"), "applies only to tcp VIPs (udp VIPs: max_sessions)")
		case v.Protocol == l4.TCP && b.MaxSessions > 0:
			l.p.add(l.vip, l.backendKey(j, "max_sessions"), "applies only to udp VIPs (tcp VIPs: max_conns)")
		}
	}
}

// checkMaglev asks for a table of at least 100 slots per backend: below
// that Maglev's shares drift more than about 1% from the weights.
func checkMaglev(l *layer, v *VIP) {
	if v.Algorithm != l4.Maglev || v.MaglevTableSize >= 100*len(v.Backends) {
		return
	}
	l.problem("maglev_table_size", "%d is too small for %d backends (use a prime >= %d)",
		v.MaglevTableSize, len(v.Backends), 100*len(v.Backends))
}

// checkXDPVIP checks what the XDP fast path needs: an [xdp] table, Maglev,
// a concrete listen address and backends on the VIP's port (packets are
// forwarded unchanged, so the backend port cannot differ).
func checkXDPVIP(l *layer, v *VIP, hasXDP bool) {
	if !hasXDP {
		l.problem("mode", "mode xdp needs an [xdp] table with an interface")
	}
	switch v.Algorithm {
	case l4.Maglev, l4.SourceHash, l4.LeastConn, l4.LeastTime:
	default:
		l.problem("algorithm", "mode xdp balances with maglev, source_hash, least_conn or least_time (as Maglev weights), not %s", v.Algorithm)
	}
	if v.Listen.IsValid() && v.Listen.Addr().IsUnspecified() {
		l.problem("listen", "mode xdp needs a concrete address, not %s", v.Listen.Addr())
	}
	for j, b := range v.Backends {
		if b.SRV != "" {
			l.p.add(l.vip, l.backendKey(j, "srv"), "srv needs mode proxy: SRV records choose each target's port, and mode xdp forwards packets unchanged")
		}
		if b.Host != "" && v.Listen.IsValid() && b.Port != v.Listen.Port() {
			l.p.add(l.vip, l.backendKey(j, "address"), "port %d must equal the listen port %d in mode xdp (packets are forwarded unchanged)",
				b.Port, v.Listen.Port())
		}
		if !b.Address.IsValid() || !v.Listen.IsValid() {
			continue
		}
		if b.Address.Port() != v.Listen.Port() {
			l.p.add(l.vip, l.backendKey(j, "address"), "port %d must equal the listen port %d in mode xdp (packets are forwarded unchanged)",
				b.Address.Port(), v.Listen.Port())
		}
		if b.Address.Addr().Is4() != v.Listen.Addr().Is4() {
			l.p.add(l.vip, l.backendKey(j, "address"), "%s is not of the VIP's address family: mode xdp forwards IPv4 to IPv4 and IPv6 to IPv6",
				b.Address.Addr())
		}
	}
}

// backendKey is the path of a key of the VIP's j-th backend.
func (l *layer) backendKey(j int, key string) string {
	return fmt.Sprintf("%s.backend[%d].%s", l.own, j, key)
}
