// The settings Diff compares, and when a reload applies each: the one
// place that says which keys need a restart.

package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// setting is one key Diff compares: how to read it and when a changed
// value reaches the running l4lb.
type setting[T any] struct {
	key    string
	get    func(*T) string
	effect Effect
	note   string
	// keep copies the running value into the next config: set for every
	// EffectRestart key, so that the config a reload leaves in force
	// says what the process really uses (InForce).
	keep func(next, running *T)
}

// globalSettings are the [global] keys. Those with EffectRestart are read
// once at start (reconcile.Options, the admin and metrics servers, the
// logger's encoder).
var globalSettings = []setting[Global]{
	{"log_level", func(g *Global) string { return g.LogLevel.String() }, EffectNow, "", nil},
	{"log_format", func(g *Global) string { return g.LogFormat.String() }, EffectRestart, "", func(n, r *Global) { n.LogFormat = r.LogFormat }},
	{"admin_socket", func(g *Global) string { return offIfEmpty(g.AdminSocket) }, EffectRestart, "", func(n, r *Global) { n.AdminSocket = r.AdminSocket }},
	{"metrics_listen", func(g *Global) string { return offIfEmpty(g.MetricsListen) }, EffectRestart, "", func(n, r *Global) { n.MetricsListen = r.MetricsListen }},
	{"drain_timeout", func(g *Global) string { return fmtDuration(g.DrainTimeout) }, EffectNow, "it bounds the drain of the VIPs this reload removes, and of the next shutdown", nil},
	{"pipe_size", func(g *Global) string { return strconv.Itoa(g.PipeSize) }, EffectRestart, "", func(n, r *Global) { n.PipeSize = r.PipeSize }},
	{"max_pipes", func(g *Global) string { return strconv.Itoa(g.MaxPipes) }, EffectNow, "", nil},
	{"workers", func(g *Global) string { return strconv.Itoa(g.Workers) }, EffectRestart, "", func(n, r *Global) { n.Workers = r.Workers }},
	{"drop_capabilities", func(g *Global) string { return strconv.FormatBool(g.DropCapabilities) }, EffectRestart, "", func(n, r *Global) { n.DropCapabilities = r.DropCapabilities }},
	{"busy_poll", func(g *Global) string { return fmtDuration(g.BusyPoll) }, EffectNow, "every event loop, from its next wait", nil},
	{"resolvers", func(g *Global) string { return addrList(g.Resolvers) }, EffectNow, "every backend name is looked up again at the new resolvers", nil},
	{"resolve_min", func(g *Global) string { return fmtDuration(g.ResolveMin) }, EffectNow, "from each name's next lookup", nil},
	{"resolve_max", func(g *Global) string { return fmtDuration(g.ResolveMax) }, EffectNow, "from each name's next lookup", nil},
}

// xdpSettings are the [xdp] keys. Those with EffectRestart are read when
// the XDP program loads; before that, they simply take the new value.
var xdpSettings = []setting[XDP]{
	{"interface", func(x *XDP) string { return x.Interface }, EffectRestart, "", func(n, r *XDP) { n.Interface = r.Interface }},
	{"attach", func(x *XDP) string { return x.Attach.String() }, EffectRestart, "", func(n, r *XDP) { n.Attach = r.Attach }},
	{"pin_path", func(x *XDP) string { return orNone(x.PinPath) }, EffectRestart, "", func(n, r *XDP) { n.PinPath = r.PinPath }},
	{"conntrack_size", func(x *XDP) string { return strconv.Itoa(x.ConntrackSize) }, EffectRestart, "", func(n, r *XDP) { n.ConntrackSize = r.ConntrackSize }},
	{"weight_refresh", func(x *XDP) string { return fmtDuration(x.WeightRefresh) }, EffectNow, "", nil},
	{"syn_rate_per_source", func(x *XDP) string { return strconv.Itoa(x.SYNRatePerSource) }, EffectNow, "every SYN from then on", nil},
}

// vipSettingList are a VIP's own keys (name and mode are compared apart).
// Their effects follow the data planes: a proxied connection copies the
// VIP's settings when it starts, a UDP session reads some on every
// datagram, the XDP program reads the VIP entry on every packet.
var vipSettingList = []setting[VIP]{
	{"algorithm", func(v *VIP) string { return v.Algorithm.String() }, EffectNewFlows, "", nil},
	{"hash_key", func(v *VIP) string { return v.HashKey.String() }, EffectNewFlows, "", nil},
	{"hash_balance_factor", func(v *VIP) string { return strconv.Itoa(v.HashBalanceFactor) }, EffectNewFlows, "", nil},
	{"maglev_table_size", func(v *VIP) string { return strconv.Itoa(v.MaglevTableSize) }, EffectNewFlows, "", nil},
	{"least_time_default", func(v *VIP) string { return fmtDuration(v.LeastTimeDefault) }, EffectNewFlows, "", nil},
	{"least_time_bias", func(v *VIP) string { return fmtDuration(v.LeastTimeBias) }, EffectNewFlows, "", nil},
	{"least_time_alpha", func(v *VIP) string { return strconv.FormatFloat(v.LeastTimeAlpha, 'g', -1, 64) }, EffectNewFlows, "RTT estimates take new samples with it", nil},
	{"least_time_metric", func(v *VIP) string { return v.LeastTimeMetric.String() }, EffectNewFlows, "probes restart to measure it; health states are kept", nil},
	{"connect_timeout", func(v *VIP) string { return fmtDuration(v.ConnectTimeout) }, EffectNewFlows, "", nil},
	{"retries", func(v *VIP) string { return strconv.Itoa(v.Retries) }, EffectNewFlows, "", nil},
	{"idle_timeout", func(v *VIP) string { return fmtDuration(v.IdleTimeout) }, EffectNewFlows, "", nil},
	{"keepalive", func(v *VIP) string { return fmtDuration(v.KeepAlive) }, EffectNewFlows, "", nil},
	{"max_conns", func(v *VIP) string { return strconv.Itoa(v.MaxConns) }, EffectNow, "no connection is cut: below the new limit the VIP stops accepting until enough end", nil},
	{"proxy_protocol", func(v *VIP) string { return v.ProxyProtocol.String() }, EffectNewFlows, "", nil},
	{"accept_proxy_protocol", func(v *VIP) string { return v.AcceptProxyProtocol.String() }, EffectNewFlows, "established connections keep the client address they started with", nil},
	{"accept_proxy_protocol_from", func(v *VIP) string { return prefixList(v.AcceptProxyProtocolFrom, strconv.Quote) }, EffectNewFlows, "", nil},
	{"freebind", func(v *VIP) string { return strconv.FormatBool(v.Freebind) }, EffectNextBind, "the running socket is bound already", nil},
	{"defer_accept", func(v *VIP) string { return strconv.FormatBool(v.DeferAccept) }, EffectNewFlows, "set on the running listener", nil},
	{"announce", func(v *VIP) string { return strconv.FormatBool(v.Announce) }, EffectNow, "the address is announced or withdrawn over BGP at once", nil},
	{"first_byte_timeout", func(v *VIP) string { return fmtDuration(v.FirstByteTimeout) }, EffectNewFlows, "", nil},
	{"queue_timeout", func(v *VIP) string { return fmtDuration(v.QueueTimeout) }, EffectNewFlows, "connections already waiting keep the time they started with", nil},
	{"sni_timeout", func(v *VIP) string { return fmtDuration(v.SNITimeout) }, EffectNewFlows, "", nil},
	{"sni_no_match", func(v *VIP) string { return v.SNINoMatch.String() }, EffectNewFlows, "", nil},
	{"route", func(v *VIP) string { return routesText(v.Routes) }, EffectNewFlows, "connections already routed keep their route and backend", nil},
	{"affinity_timeout", func(v *VIP) string { return fmtDuration(v.AffinityTimeout) }, EffectNewFlows, "the affinity table starts empty: clients' pins are forgotten", nil},
	{"session_timeout", func(v *VIP) string { return fmtDuration(v.SessionTimeout) }, EffectNow, "every session, established ones too", nil},
	{"max_sessions", func(v *VIP) string { return strconv.Itoa(v.MaxSessions) }, EffectNewFlows, "no session is ended", nil},
	{"rebalance_rate", func(v *VIP) string { return strconv.Itoa(v.RebalanceRate) }, EffectNow, "the next rebalance; 0 refuses rebalances and stops a running one", nil},
	{"udp_responses", func(v *VIP) string { return strconv.Itoa(v.UDPResponses) }, EffectNow, "counted on established sessions too", nil},
	{"forward", func(v *VIP) string { return v.Forward.String() }, EffectNow, "every packet from then on, established flows too", nil},
	{"new_flow_rate", func(v *VIP) string { return strconv.Itoa(v.NewFlowRate) }, EffectNow, "flows already tracked stay tracked", nil},
	{"allow", func(v *VIP) string { return prefixList(v.Allow, strconv.Quote) }, EffectNewFlows, accessNote, nil},
	{"deny", func(v *VIP) string { return prefixList(v.Deny, strconv.Quote) }, EffectNewFlows, accessNote, nil},
	{"max_conns_per_client", func(v *VIP) string { return strconv.Itoa(v.MaxConnsPerClient) }, EffectNewFlows, "no connection is cut; open ones count against the new limit", nil},
	{"conn_rate_per_client", func(v *VIP) string { return strconv.Itoa(v.ConnRatePerClient) }, EffectNewFlows, "", nil},
	{"max_sessions_per_client", func(v *VIP) string { return strconv.Itoa(v.MaxSessionsPerClient) }, EffectNewFlows, "no session is ended; open ones count against the new limit", nil},
	{"backup_mode", func(v *VIP) string { return v.BackupMode.String() }, EffectNow, "while the backups serve, the next rebuild of the VIP's table", nil},
	{"log_connections", func(v *VIP) string { return strconv.FormatBool(v.LogConnections) }, EffectNewFlows, "established connections and sessions keep the value they started with", nil},
	{"log_connections_rate", func(v *VIP) string { return strconv.Itoa(v.LogConnectionsRate) }, EffectNow, "every line from then on", nil},
}

// healthSettingList are the [vip.health] keys. A changed check restarts
// every backend's probes (at a random point of the interval); the health
// states carry over unless the type changes.
var healthSettingList = []setting[Health]{
	{"type", func(h *Health) string { return h.Type.String() }, EffectNow, "every backend's health starts again at unknown (eligible) until its first probe", nil},
	{"interval", func(h *Health) string { return fmtDuration(h.Interval) }, EffectNow, probesRestart, nil},
	{"timeout", func(h *Health) string { return fmtDuration(h.Timeout) }, EffectNow, probesRestart, nil},
	{"rise", func(h *Health) string { return strconv.Itoa(h.Rise) }, EffectNow, probesRestart, nil},
	{"fall", func(h *Health) string { return strconv.Itoa(h.Fall) }, EffectNow, probesRestart, nil},
	{"port", func(h *Health) string { return strconv.Itoa(h.Port) }, EffectNow, probesRestart, nil},
	{"max_fails", func(h *Health) string { return strconv.Itoa(h.MaxFails) }, EffectNow, probesRestart, nil},
	{"fail_timeout", func(h *Health) string { return fmtDuration(h.FailTimeout) }, EffectNow, probesRestart, nil},
	{"slow_start", func(h *Health) string { return fmtDuration(h.SlowStart) }, EffectNow, "ramps in progress too", nil},
	{"on_down", func(h *Health) string { return h.OnDown.String() }, EffectNow, "for backends that go down from now on", nil},
	{"send", func(h *Health) string { return quoteBytes(h.Send) }, EffectNow, probesRestart, nil},
	{"expect", func(h *Health) string { return quoteBytes(h.Expect) }, EffectNow, probesRestart, nil},
	{"expect_regex", func(h *Health) string { return strconv.Quote(h.ExpectRegex) }, EffectNow, probesRestart, nil},
	{"path", func(h *Health) string { return strconv.Quote(h.Path) }, EffectNow, probesRestart, nil},
	{"host", func(h *Health) string { return strconv.Quote(h.Host) }, EffectNow, probesRestart, nil},
	{"status", func(h *Health) string { return strconv.Itoa(h.Status) }, EffectNow, probesRestart, nil},
	{"websocket", func(h *Health) string { return strconv.FormatBool(h.WebSocket) }, EffectNow, probesRestart, nil},
	{"user", func(h *Health) string { return strconv.Quote(h.User) }, EffectNow, probesRestart, nil},
	{"password", func(h *Health) string { return h.Password }, EffectNow, probesRestart, nil}, // shown by secret
	{"database", func(h *Health) string { return strconv.Quote(h.Database) }, EffectNow, probesRestart, nil},
	{"role", func(h *Health) string { return h.Role.String() }, EffectNow, probesRestart, nil},
	{"send_proxy", func(h *Health) string { return h.SendProxy.String() }, EffectNow, probesRestart, nil},
}

const probesRestart = "probes restart with it; health states are kept"

// accessNote is what an allow/deny change leaves alone.
const accessNote = "established TCP connections are not cut; with the XDP program attached, a newly refused client's UDP datagrams are dropped there, sessions included"

// compare lists the settings whose values differ between o and v, among
// those applies accepts.
func compare[T any](list []setting[T], prefix string, o, v *T, applies func(key string) bool) []Change {
	var out []Change
	for _, s := range list {
		if old, cur := s.get(o), s.get(v); old != cur && applies(s.key) {
			out = append(out, Change{Key: prefix + s.key, Old: old, New: cur, Effect: s.effect, Note: s.note})
		}
	}
	return out
}

func diffGlobal(o, v *Global) []Change {
	return compare(globalSettings, "global.", o, v, func(string) bool { return true })
}

// diffXDP compares the [xdp] tables. loaded: the running l4lb's XDP
// program is loaded; starts: next has an xdp VIP (a reload then loads the
// program if it is not).
func diffXDP(o, v *XDP, loaded, starts bool) []Change {
	switch {
	case o == nil && v == nil:
		return nil
	case o != nil && v != nil:
		ch := compare(xdpSettings, "xdp.", o, v, func(string) bool { return true })
		for i := range ch {
			if !loaded && ch[i].Effect == EffectRestart {
				ch[i].Effect = EffectNow
			}
		}
		return ch
	}
	c := Change{Key: "xdp", Old: xdpTable(o), New: xdpTable(v), Effect: EffectNow}
	switch {
	case loaded && v == nil:
		c.Effect, c.Note = EffectRestart, "the XDP program stays loaded until l4lb restarts"
	case loaded:
		c.Effect, c.Note = EffectRestart, "the XDP program loaded at start keeps its settings until l4lb restarts"
	case starts:
		c.Note = "the XDP program loads with the first xdp VIP"
	}
	return []Change{c}
}

// xdpTable sums up an [xdp] table for a Change.
func xdpTable(x *XDP) string {
	if x == nil {
		return "(none)"
	}
	return fmt.Sprintf("interface %s, attach %s", x.Interface, x.Attach)
}

// vipSettings compares the VIP keys that apply to v (a key that only
// applied to o went with the setting that made it apply: an algorithm,
// a mode).
func vipSettings(o, v *VIP) []Change {
	return compare(vipSettingList, "", o, v, func(key string) bool { return vipKeyApplies(key, v) })
}

// healthSettings compares health checks. The keys of one check type are
// compared only while the type stays (a new type restarts everything). A
// running config printed by the admin API has its passwords redacted:
// those are not compared.
func healthSettings(o, v *Health) []Change {
	applies := func(key string) bool {
		switch {
		case key == "password" && o.Password == Redacted && v.Password != "":
			return false
		case o.Type != v.Type:
			return !typeScoped(key)
		}
		return healthKeyApplies(key, v)
	}
	out := compare(healthSettingList, "health.", o, v, applies)
	for i := range out {
		if out[i].Key == "health.password" {
			out[i].Old, out[i].New = secret(o.Password), secret(v.Password)
		}
	}
	return out
}

// healthKeyApplies reports whether key applies to h's check type (see
// healthScopes; send and expect stand for their _hex forms).
func healthKeyApplies(key string, h *Health) bool {
	for _, s := range healthScopes {
		if s.key == key {
			return slices.Contains(s.types, h.Type)
		}
	}
	return true
}

// typeScoped reports whether key belongs to some check types only.
func typeScoped(key string) bool {
	for _, s := range healthScopes {
		if s.key == key {
			return true
		}
	}
	return false
}

func offIfEmpty(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// quoteBytes prints check bytes as a quoted string (escapes for the rest).
func quoteBytes(b []byte) string { return strconv.Quote(string(b)) }

// secret hides a password: only whether there is one shows.
func secret(s string) string {
	if s == "" {
		return "(none)"
	}
	return Redacted
}

// keepRestartOnly copies into next the running values of list's
// restart-only keys.
func keepRestartOnly[T any](list []setting[T], next, running *T) {
	for _, s := range list {
		if s.effect == EffectRestart {
			s.keep(next, running)
		}
	}
}

// routesText sums up a VIP's SNI routes for a Change: each route's name,
// server names, algorithm, health check and backends.
func routesText(rs []Route) string {
	if len(rs) == 0 {
		return "(none)"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		bs := make([]string, len(r.Backends))
		for j, b := range r.Backends {
			bs[j] = fmt.Sprintf("%s=%s/%d", b.ID(), b.Address, b.Weight)
			if b.Backup {
				bs[j] += "/backup"
			}
		}
		h := r.Health
		parts[i] = fmt.Sprintf("%s %v %s health %s/%s/%s/%d/%d/%d/%s [%s]", r.Name, r.Names, r.Algorithm, h.Type, fmtDuration(h.Interval),
			fmtDuration(h.Timeout), h.Rise, h.Fall, h.Port, h.OnDown, strings.Join(bs, " "))
	}
	return strings.Join(parts, "; ")
}
