// Checks that span several keys of a VIP: which keys apply, Maglev, XDP.

package config

import (
	"fmt"

	"github.com/l4lb/l4lb/l4"
)

// sentProxyProtocol is the PROXY header version v sends its backends:
// proxy_protocol where it applies (checkScopes turns it off elsewhere).
func sentProxyProtocol(v *VIP) l4.ProxyVersion {
	if !isTCPProxy(v) {
		return l4.ProxyOff
	}
	return v.ProxyProtocol
}

// checkScopes reports keys the VIP sets where they do not apply, and gives
// every key that does not apply its built-in value, so that a Config holds
// nothing that means nothing (a [defaults] value a VIP ignores would
// otherwise look like a change on reload).
func checkScopes(l *layer, v *VIP) {
	builtin := builtinVIP(v.Mode)
	for i := range vipKeys {
		k := &vipKeys[i]
		if k.applies(v) {
			continue
		}
		if l.ownSet(k.name) {
			msg := k.refused
			if msg == "" {
				msg = "applies only to " + k.scope.String()
			}
			l.problem(k.name, "%s", msg)
		}
		k.val.copy(v, &builtin)
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
	l := newLayer(newProblems("", nil), "", "builtin", "")
	var v VIP
	resolveKeys(l, vipKeys, rawTable{"mode": mode.String()}, nil, &v)
	return v
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
		case v.Mode == l4.ModeXDP && b.MaxConnRate > 0:
			l.p.add(l.vip, l.backendKey(j, "max_conn_rate"), "applies only to tcp VIPs in proxy mode: the kernel forwards an xdp VIP's flows")
		case v.Protocol == l4.UDP && b.MaxConnRate > 0:
			l.p.add(l.vip, l.backendKey(j, "max_conn_rate"), "applies only to tcp VIPs (a new UDP session has no queue to wait in)")
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
