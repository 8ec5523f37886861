// Format: a Config back to TOML, every value resolved, for
// `l4lb status --show-config` and for comparing a file with what runs.

package config

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/l4lb/l4lb/l4"
)

// Redacted replaces secrets (health check passwords) in Format's output.
const Redacted = "<redacted>"

// FormatOptions tune Format. The zero value redacts secrets.
type FormatOptions struct {
	// ShowSecrets prints passwords instead of Redacted.
	ShowSecrets bool
}

// Format writes c as TOML with every key that applies spelled out: what
// each VIP runs with after [defaults] and the built-in defaults. Parse of
// the result gives c back (with secrets shown).
func Format(c *Config, opts FormatOptions) []byte {
	w := &tomlWriter{}
	w.comment("l4lb configuration in force, every default resolved (from %s)", c.Path)
	formatGlobal(w, &c.Global)
	if c.XDP != nil {
		w.table("xdp")
		w.str("interface", c.XDP.Interface)
		w.str("attach", c.XDP.Attach.String())
		w.str("pin_path", c.XDP.PinPath)
		w.int("conntrack_size", c.XDP.ConntrackSize)
		w.dur("weight_refresh", c.XDP.WeightRefresh)
		w.int("syn_rate_per_source", c.XDP.SYNRatePerSource)
	}
	formatBGP(w, c.BGP, opts)
	for i := range c.VIPs {
		formatVIP(w, &c.VIPs[i], opts)
	}
	return []byte(w.b.String())
}

func formatGlobal(w *tomlWriter, g *Global) {
	w.table("global")
	w.str("log_level", g.LogLevel.String())
	w.str("log_format", g.LogFormat.String())
	admin := g.AdminSocket
	if admin == "" {
		admin = "off"
	}
	w.str("admin_socket", admin)
	if g.MetricsListen != "" {
		w.str("metrics_listen", g.MetricsListen)
	}
	w.dur("drain_timeout", g.DrainTimeout)
	w.int("pipe_size", g.PipeSize)
	w.int("max_pipes", g.MaxPipes)
	w.int("workers", g.Workers)
	w.bool("drop_capabilities", g.DropCapabilities)
	w.dur("busy_poll", g.BusyPoll)
	w.raw("resolvers", addrList(g.Resolvers))
	w.dur("resolve_min", g.ResolveMin)
	w.dur("resolve_max", g.ResolveMax)
}

func formatVIP(w *tomlWriter, v *VIP, opts FormatOptions) {
	w.array("vip")
	w.str("name", v.Name)
	w.str("listen", v.Listen.String())
	w.str("protocol", fmt.Sprint(v.Protocol))
	w.str("mode", fmt.Sprint(v.Mode))
	w.str("algorithm", fmt.Sprint(v.Algorithm))
	keys := []struct {
		key   string
		write func()
	}{
		{"hash_key", func() { w.str("hash_key", fmt.Sprint(v.HashKey)) }},
		{"hash_balance_factor", func() { w.int("hash_balance_factor", v.HashBalanceFactor) }},
		{"maglev_table_size", func() { w.int("maglev_table_size", v.MaglevTableSize) }},
		{"least_time_default", func() { w.dur("least_time_default", v.LeastTimeDefault) }},
		{"least_time_bias", func() { w.dur("least_time_bias", v.LeastTimeBias) }},
		{"least_time_alpha", func() { w.raw("least_time_alpha", strconv.FormatFloat(v.LeastTimeAlpha, 'g', -1, 64)) }},
		{"least_time_metric", func() { w.str("least_time_metric", fmt.Sprint(v.LeastTimeMetric)) }},
		{"connect_timeout", func() { w.dur("connect_timeout", v.ConnectTimeout) }},
		{"retries", func() { w.int("retries", v.Retries) }},
		{"idle_timeout", func() { w.dur("idle_timeout", v.IdleTimeout) }},
		{"keepalive", func() { w.dur("keepalive", v.KeepAlive) }},
		{"max_conns", func() { w.int("max_conns", v.MaxConns) }},
		{"freebind", func() { w.bool("freebind", v.Freebind) }},
		{"defer_accept", func() { w.bool("defer_accept", v.DeferAccept) }},
		{"announce", func() { w.bool("announce", v.Announce) }},
		{"first_byte_timeout", func() { w.dur("first_byte_timeout", v.FirstByteTimeout) }},
		{"queue_timeout", func() { w.dur("queue_timeout", v.QueueTimeout) }},
		{"proxy_protocol", func() { w.str("proxy_protocol", fmt.Sprint(v.ProxyProtocol)) }},
		{"accept_proxy_protocol", func() { w.str("accept_proxy_protocol", v.AcceptProxyProtocol.String()) }},
		{"accept_proxy_protocol_from", func() { w.raw("accept_proxy_protocol_from", prefixList(v.AcceptProxyProtocolFrom, quoteTOML)) }},
		{"sni_timeout", func() { w.dur("sni_timeout", v.SNITimeout) }},
		{"sni_no_match", func() { w.str("sni_no_match", v.SNINoMatch.String()) }},
		{"affinity_timeout", func() { w.dur("affinity_timeout", v.AffinityTimeout) }},
		{"rebalance_rate", func() { w.int("rebalance_rate", v.RebalanceRate) }},
		{"session_timeout", func() { w.dur("session_timeout", v.SessionTimeout) }},
		{"max_sessions", func() { w.int("max_sessions", v.MaxSessions) }},
		{"udp_responses", func() { w.int("udp_responses", v.UDPResponses) }},
		{"forward", func() { w.str("forward", fmt.Sprint(v.Forward)) }},
		{"new_flow_rate", func() { w.int("new_flow_rate", v.NewFlowRate) }},
		{"backup_mode", func() { w.str("backup_mode", v.BackupMode.String()) }},
		{"allow", func() { w.raw("allow", prefixList(v.Allow, quoteTOML)) }},
		{"deny", func() { w.raw("deny", prefixList(v.Deny, quoteTOML)) }},
		{"max_conns_per_client", func() { w.int("max_conns_per_client", v.MaxConnsPerClient) }},
		{"conn_rate_per_client", func() { w.int("conn_rate_per_client", v.ConnRatePerClient) }},
		{"max_sessions_per_client", func() { w.int("max_sessions_per_client", v.MaxSessionsPerClient) }},
		{"log_connections", func() { w.bool("log_connections", v.LogConnections) }},
		{"log_connections_rate", func() { w.int("log_connections_rate", v.LogConnectionsRate) }},
	}
	for _, k := range keys {
		if vipKeyApplies(k.key, v) {
			k.write()
		}
	}
	formatHealth(w, "vip.health", &v.Health, opts)
	formatBackends(w, "vip.backend", v.Backends)
	for i := range v.Routes {
		r := &v.Routes[i]
		w.array("vip.route")
		w.str("name", r.Name)
		w.raw("names", stringList(r.Names))
		w.str("algorithm", fmt.Sprint(r.Algorithm))
		formatHealth(w, "vip.route.health", &r.Health, opts)
		formatBackends(w, "vip.route.backend", r.Backends)
	}
}

// formatBackends writes bs as the array of tables name.
func formatBackends(w *tomlWriter, name string, bs []Backend) {
	for _, b := range bs {
		w.array(name)
		if b.Name != "" {
			w.str("name", b.Name)
		}
		switch {
		case b.SRV != "":
			w.str("srv", b.SRV)
		default:
			w.str("address", addressText(b))
		}
		w.int("weight", b.Weight)
		if b.Backup {
			w.bool("backup", true)
		}
		if b.MaxConns > 0 {
			w.int("max_conns", b.MaxConns)
		}
		if b.MaxSessions > 0 {
			w.int("max_sessions", b.MaxSessions)
		}
	}
}

// stringList is a TOML array of strings.
func stringList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quoteTOML(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// vipKeyApplies reports whether key applies to v (see vipScopes).
func vipKeyApplies(key string, v *VIP) bool {
	for _, s := range vipScopes {
		if s.key == key {
			return s.applies(v)
		}
	}
	return true
}

func formatHealth(w *tomlWriter, table string, h *Health, opts FormatOptions) {
	w.table(table)
	w.str("type", fmt.Sprint(h.Type))
	w.dur("interval", h.Interval)
	w.dur("timeout", h.Timeout)
	w.int("rise", h.Rise)
	w.int("fall", h.Fall)
	w.int("port", h.Port)
	w.int("max_fails", h.MaxFails)
	w.dur("fail_timeout", h.FailTimeout)
	w.dur("slow_start", h.SlowStart)
	w.str("on_down", h.OnDown.String())
	applies := func(key string) bool {
		for _, s := range healthScopes {
			if s.key == key {
				return slices.Contains(s.types, h.Type)
			}
		}
		return false
	}
	if applies("send") && h.Send != nil {
		w.str("send_hex", hex.EncodeToString(h.Send))
	}
	switch {
	case !applies("expect"):
	case h.ExpectRegex != "":
		w.str("expect_regex", h.ExpectRegex)
	case h.Expect != nil:
		w.str("expect_hex", hex.EncodeToString(h.Expect))
	}
	if applies("path") {
		w.str("path", h.Path)
		if h.Host != "" {
			w.str("host", h.Host)
		}
		w.int("status", h.Status)
		w.bool("websocket", h.WebSocket)
	}
	if applies("user") && h.User != "" {
		w.str("user", h.User)
	}
	if applies("password") && h.Password != "" {
		pw := Redacted
		if opts.ShowSecrets {
			pw = h.Password
		}
		w.str("password", pw)
	}
	if applies("database") && h.Database != "" {
		w.str("database", h.Database)
	}
	if applies("role") {
		w.str("role", h.Role.String())
	}
	if applies("send_proxy") {
		w.bool("send_proxy", h.SendProxy != l4.ProxyOff)
	}
}

// tomlWriter writes TOML text.
type tomlWriter struct{ b strings.Builder }

func (w *tomlWriter) comment(format string, args ...any) {
	fmt.Fprintf(&w.b, "# "+format+"\n", args...)
}

func (w *tomlWriter) table(name string) { fmt.Fprintf(&w.b, "\n[%s]\n", name) }
func (w *tomlWriter) array(name string) { fmt.Fprintf(&w.b, "\n[[%s]]\n", name) }
func (w *tomlWriter) raw(key, v string) { fmt.Fprintf(&w.b, "%s = %s\n", key, v) }
func (w *tomlWriter) str(key, v string) { w.raw(key, quoteTOML(v)) }
func (w *tomlWriter) int(key string, v int) {
	w.raw(key, strconv.Itoa(v))
}
func (w *tomlWriter) bool(key string, v bool) { w.raw(key, strconv.FormatBool(v)) }
func (w *tomlWriter) dur(key string, d time.Duration) {
	w.str(key, fmtDuration(d))
}

// quoteTOML quotes s as a TOML basic string.
func quoteTOML(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
