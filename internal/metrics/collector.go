// The collector: one Status read per scrape, turned into metrics.

package metrics

import (
	"math"
	"net/netip"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/l4lb/l4lb/l4/plane"
)

// statusCollector turns one Status read into metrics, so the data plane
// keeps only its own atomics and pays nothing between scrapes.
type statusCollector struct {
	status func() plane.Status
	descs  map[string]*prometheus.Desc
	// labels holds each series name the collector declares with its
	// variable labels: what Names reports.
	labels map[string][]string
}

var vipLabels, backendLabels = []string{"vip", "protocol"}, []string{"vip", "backend", "address"}

// nameLabels: a named backend's VIP, identity, and what it looks up (name:port or the SRV name).
var nameLabels = []string{"vip", "backend", "name"}

func newStatusCollector(status func() plane.Status) *statusCollector {
	c := &statusCollector{status: status, labels: map[string][]string{}}
	d := func(name, help string, labels []string) *prometheus.Desc {
		c.labels["l4lb_"+name] = labels
		return prometheus.NewDesc("l4lb_"+name, help, labels, nil)
	}
	c.descs = map[string]*prometheus.Desc{
		"build":       d("build_info", "Always 1; the labels describe the running binary.", []string{"version", "commit", "goversion"}),
		"started":     d("start_time_seconds", "When the process started, in Unix seconds.", nil),
		"reload_time": d("last_reload_timestamp_seconds", "When the last reload (SIGHUP) was tried, in Unix seconds; absent before the first.", nil),
		"reload_ok":   d("last_reload_successful", "1 if the last reload was applied, 0 if the file was refused (the running config stayed).", nil),
		"xdp_counter": d("xdp_events_total", "XDP program events: packets passed to the kernel or dropped, by reason; flow table events.", []string{"event"}),
		"b_packets":   d("backend_packets_total", "Packets forwarded to the backend (xdp VIPs).", backendLabels),
		"active":      d("vip_active", "Connections or sessions in progress.", vipLabels),
		"accepted":    d("vip_accepted_total", "Connections accepted or sessions created.", vipLabels),
		"no_backend":  d("vip_no_backend_total", "Clients turned away because no backend could be reached.", vipLabels),
		"eligible":    d("vip_eligible_backends", "Backends new flows may go to.", vipLabels),
		"draining":    d("vip_draining", "1 while a VIP removed by a reload drains its connections.", vipLabels),
		"b_max":       d("backend_max_flows", "The backend's cap on live flows (max_conns, max_sessions); 0 = none.", backendLabels),
		"sni":         d("vip_sni_total", "Connections of a VIP with SNI routes that no route took: event no_match (an unlisted name or none), not_tls (not TLS or malformed), timeout (no whole ClientHello within sni_timeout: reset), default (sent to the VIP's own backends).", append(vipLabels[:len(vipLabels):len(vipLabels)], "event")),
		"route_conns": d("vip_route_connections_total", "Connections an SNI route took (its names matched the ClientHello, or a postgres VIP's startup its databases and users).", []string{"vip", "route"}),
		"route_elig":  d("vip_route_eligible_backends", "Backends of an SNI route new connections may go to.", []string{"vip", "route"}),
		"log_drop":    d("vip_conn_log_dropped_total", "log_connections lines dropped over log_connections_rate.", vipLabels),
		"serving_bk":  d("vip_serving_backups", "1 while the VIP's backup backends take its new flows (no primary is eligible); VIPs with backups only.", vipLabels),
		"denied":      d("vip_denied_total", "Clients refused by the VIP's allow/deny lists in user space (TCP connections reset, UDP datagrams dropped).", vipLabels),
		"client_lim":  d("vip_client_limited_total", "Clients refused by a per-client limit (TCP connections reset, UDP datagrams dropped).", vipLabels),
		"dns_errors":  d("dns_lookup_errors_total", "Failed or empty lookups of a named backend's DNS name (the last good answer stays in use).", nameLabels),
		"dns_age":     d("dns_answer_age_seconds", "Seconds since a named backend's name last gave a good answer; absent until it has.", nameLabels),
		"dns_addrs":   d("dns_addresses", "Addresses (backends) in a named backend's last good answer; 0 = never resolved.", nameLabels),
		"pipes_open":  d("pipes_open", "Splice pipes with open descriptors.", nil),
		"pipes_lent":  d("pipes_in_use", "Splice pipes moving a chunk now.", nil),
		"pipes_max":   d("pipes_max", "Cap on open splice pipes (max_pipes); 0 = none.", nil),
		"kern_conns":  d("kernel_forwarded_connections", "TCP connections forwarded inside the kernel now (kernel_forwarding).", nil),
		"kern_total":  d("kernel_forwarded_connections_total", "TCP connections ever moved into the kernel (kernel_forwarding).", nil),
		"worker_conn": d("worker_connections", "TCP connections an event loop proxies now.", []string{"worker"}),
		"worker_udp":  d("worker_udp_sessions", "UDP sessions an event loop owns now.", []string{"worker"}),
		"b_live":      d("backend_live_flows", "Live flows on the backend.", backendLabels),
		"b_flows":     d("backend_flows_total", "Flows established to the backend.", backendLabels),
		"b_fails":     d("backend_connect_failures_total", "Connects to the backend that failed.", backendLabels),
		"b_noreply":   d("backend_udp_unanswered_sessions_total", "UDP sessions that ended by session_timeout without a reply to any of their datagrams.", backendLabels),
		"b_in":        d("backend_bytes_in_total", "Bytes from clients to the backend.", backendLabels),
		"b_out":       d("backend_bytes_out_total", "Bytes from the backend to clients.", backendLabels),
		"b_up":        d("backend_up", "1 when health checks say up (or unknown), 0 when down.", backendLabels),
		"b_rtt":       d("backend_rtt_seconds", "Handshake RTT estimate (EWMA).", backendLabels),
		"b_weight":    d("backend_weight", "Configured weight.", backendLabels),
		"b_lag":       d("backend_replica_lag_seconds", "A replica's replication lag at its last check (postgres and mysql checks with role replica); +Inf when it could not be told, which max_lag treats as above it.", backendLabels),
		"bgp_peer_up": d("bgp_peer_up", "1 while the BGP session with the peer is established.", []string{"peer"}),
		"bgp_sent":    d("bgp_peer_prefixes_sent", "Routes sent to the BGP peer.", []string{"peer"}),
		"bgp_routes":  d("bgp_announced_prefixes", "Host routes l4lb announces (VIP addresses with an eligible backend).", nil),
		"bfd_up":      d("bfd_session_up", "1 while the BFD session with the BGP peer is up.", []string{"peer"}),
		"bfd_state":   d("bfd_session_state", "The BFD session's state: 0 admindown, 1 down, 2 init, 3 up.", []string{"peer"}),
		"bfd_downs":   d("bfd_session_downs_total", "Times the BFD session went from up to down.", []string{"peer"}),
		"bfd_sent":    d("bfd_packets_sent_total", "BFD control packets sent to the peer.", []string{"peer"}),
		"bfd_recv":    d("bfd_packets_received_total", "BFD control packets received from the peer.", []string{"peer"}),
		"bfd_resets":  d("bfd_bgp_resets_total", "BGP sessions reset because their BFD session failed.", []string{"peer"}),
		"bfd_dropped": d("bfd_packets_dropped_total", "BFD packets that reached no session, by reason: malformed, ttl (not 255), no_session.", []string{"reason"}),
		"fs_sent":     d("flow_sync_flows_sent_total", "Pinned flows flow sync sent to the peers (each to every peer).", nil),
		"fs_limited":  d("flow_sync_flows_unsent_total", "Pinned flows a round left out for max_rate.", nil),
		"fs_recv":     d("flow_sync_flows_received_total", "Peers' flows by what became of them: installed, known (the table had it), foreign_vip, unknown_backend, failed, rate_limited (max_rate), table_full (max_entries).", []string{"result"}),
		"fs_dropped":  d("flow_sync_datagrams_dropped_total", "Flow sync datagrams (or flows in them) dropped: malformed, version, auth (HMAC), replay (seen before or too far from this clock).", []string{"reason"}),
		"fs_peers":    d("flow_sync_peer_flows", "Flow table entries installed from peers (as of the last round).", nil),
		"announced":   d("vip_announced", "1 while the VIP's address is announced over BGP; absent without [bgp].", vipLabels),
	}
	c.declareCounters(d)
	return c
}

// declareCounters adds the series the data planes' status structs declare
// (plane.Counter): one per metric name, split by its label if it has
// one, with the help of the first field that names it.
func (c *statusCollector) declareCounters(d func(name, help string, labels []string) *prometheus.Desc) {
	for _, s := range []any{&plane.TCPStatus{}, &plane.UDPStatus{}, &plane.XDPVIPStatus{}, &plane.StartupStatus{}, &plane.FailoverStatus{}} {
		for _, k := range plane.Counters(s) {
			if k.Metric == "" || c.descs[k.Metric] != nil {
				continue
			}
			labels := vipLabels
			if k.Label != "" {
				labels = append(vipLabels[:len(vipLabels):len(vipLabels)], k.Label)
			}
			c.descs[k.Metric] = d(k.Metric, k.Help, labels)
		}
	}
}

// collectCounters sends a VIP's data-plane counters.
func (c *statusCollector) collectCounters(ch chan<- prometheus.Metric, vl []string, cs []plane.Counter) {
	for _, k := range cs {
		if k.Metric == "" {
			continue
		}
		kind, labels := prometheus.CounterValue, vl
		if k.Gauge {
			kind = prometheus.GaugeValue
		}
		if k.Label != "" {
			labels = append(vl[:len(vl):len(vl)], k.LabelValue)
		}
		ch <- prometheus.MustNewConstMetric(c.descs[k.Metric], kind, k.Value, labels...)
	}
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	st := c.status()
	p := st.Process
	ch <- prometheus.MustNewConstMetric(c.descs["build"], gauge, 1, p.Version, p.Commit, p.GoVersion)
	ch <- prometheus.MustNewConstMetric(c.descs["started"], gauge, float64(p.Started.UnixNano())/1e9)
	if r := p.LastReload; r != nil {
		ok := 0.0
		if r.OK {
			ok = 1
		}
		ch <- prometheus.MustNewConstMetric(c.descs["reload_time"], gauge, float64(r.Time.UnixNano())/1e9)
		ch <- prometheus.MustNewConstMetric(c.descs["reload_ok"], gauge, ok)
	}
	if x := st.XDP; x != nil {
		for name, v := range x.Counters {
			ch <- prometheus.MustNewConstMetric(c.descs["xdp_counter"], counter, float64(v), name)
		}
	}
	c.collectBGP(ch, st)
	c.collectFlowSync(ch, st.FlowSync)
	ch <- prometheus.MustNewConstMetric(c.descs["pipes_open"], gauge, float64(st.Pipes.Open))
	ch <- prometheus.MustNewConstMetric(c.descs["pipes_lent"], gauge, float64(st.Pipes.Lent))
	ch <- prometheus.MustNewConstMetric(c.descs["pipes_max"], gauge, float64(st.Pipes.Max))
	ch <- prometheus.MustNewConstMetric(c.descs["kern_conns"], gauge, float64(st.Kernel.Conns))
	ch <- prometheus.MustNewConstMetric(c.descs["kern_total"], prometheus.CounterValue, float64(st.Kernel.Total))
	for i, wk := range st.Workers {
		ch <- prometheus.MustNewConstMetric(c.descs["worker_conn"], gauge, float64(wk.Conns), strconv.Itoa(i))
		ch <- prometheus.MustNewConstMetric(c.descs["worker_udp"], gauge, float64(wk.UDPSessions), strconv.Itoa(i))
	}
	seen := map[[2]string]bool{}
	for _, v := range st.VIPs {
		vl := []string{v.Name, v.Protocol}
		// A draining VIP may share its name with its running successor:
		// one series per label set, the running VIP's.
		if k := [2]string{v.Name, v.Protocol}; seen[k] {
			continue
		} else {
			seen[k] = true
		}
		ch <- prometheus.MustNewConstMetric(c.descs["active"], gauge, float64(v.Active), vl...)
		ch <- prometheus.MustNewConstMetric(c.descs["accepted"], counter, float64(v.Accepted), vl...)
		ch <- prometheus.MustNewConstMetric(c.descs["no_backend"], counter, float64(v.NoBackend), vl...)
		ch <- prometheus.MustNewConstMetric(c.descs["denied"], counter, float64(v.Denied), vl...)
		ch <- prometheus.MustNewConstMetric(c.descs["client_lim"], counter, float64(v.ClientLimited), vl...)
		ch <- prometheus.MustNewConstMetric(c.descs["eligible"], gauge, float64(v.Eligible), vl...)
		draining := 0.0
		if v.Draining {
			draining = 1
		}
		ch <- prometheus.MustNewConstMetric(c.descs["draining"], gauge, draining, vl...)
		if v.Serving != "" {
			ch <- prometheus.MustNewConstMetric(c.descs["serving_bk"], gauge, boolGauge(v.Serving == "backups"), vl...)
		}
		for _, n := range v.Names {
			nl := []string{v.Name, n.Backend, n.Lookup}
			ch <- prometheus.MustNewConstMetric(c.descs["dns_errors"], counter, float64(n.Errors), nl...)
			ch <- prometheus.MustNewConstMetric(c.descs["dns_addrs"], gauge, float64(len(n.Addresses)), nl...)
			if n.AnswerAge > 0 {
				ch <- prometheus.MustNewConstMetric(c.descs["dns_age"], gauge, n.AnswerAge, nl...)
			}
		}
		if v.XDP == nil {
			ch <- prometheus.MustNewConstMetric(c.descs["log_drop"], counter, float64(v.ConnLogDropped), vl...)
		}
		for _, cs := range [][]plane.Counter{plane.Counters(v.TCP), plane.Counters(v.XDP), plane.Counters(v.XDPGuard), plane.Counters(v.UDP), plane.Counters(v.Failover)} {
			c.collectCounters(ch, vl, cs)
		}
		c.collectBackends(ch, v.Name, v.XDP != nil, v.UDP != nil, v.Backends)
		if sni := v.SNI; sni != nil {
			for event, n := range map[string]uint64{"no_match": sni.NoMatchCount, "not_tls": sni.NotTLS, "timeout": sni.Timeouts, "default": sni.Default} {
				ch <- prometheus.MustNewConstMetric(c.descs["sni"], counter, float64(n), append(vl[:len(vl):len(vl)], event)...)
			}
			c.collectCounters(ch, vl, plane.Counters(sni.Startup))
			for _, r := range sni.Routes {
				ch <- prometheus.MustNewConstMetric(c.descs["route_conns"], counter, float64(r.Routed), v.Name, r.Name)
				ch <- prometheus.MustNewConstMetric(c.descs["route_elig"], gauge, float64(r.Eligible), v.Name, r.Name)
				// A route's backends are the VIP's "NAME/ROUTE" (its
				// backend names may repeat the VIP's own).
				c.collectBackends(ch, v.Name+"/"+r.Name, false, false, r.Backends)
			}
		}
	}
}

// collectBackends sends the series of a VIP's (or an SNI route's)
// backends; udp: a proxy UDP VIP's.
func (c *statusCollector) collectBackends(ch chan<- prometheus.Metric, vip string, xdp, udp bool, bs []plane.BackendStatus) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	for _, b := range bs {
		bl := []string{vip, b.ID, b.Address}
		up := 1.0
		if b.Health == "down" {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(c.descs["b_live"], gauge, float64(b.LiveFlows), bl...)
		ch <- prometheus.MustNewConstMetric(c.descs["b_flows"], counter, float64(b.Flows), bl...)
		ch <- prometheus.MustNewConstMetric(c.descs["b_fails"], counter, float64(b.ConnectFails), bl...)
		if udp {
			ch <- prometheus.MustNewConstMetric(c.descs["b_noreply"], counter, float64(b.Unanswered), bl...)
		}
		ch <- prometheus.MustNewConstMetric(c.descs["b_in"], counter, float64(b.BytesIn), bl...)
		if xdp {
			ch <- prometheus.MustNewConstMetric(c.descs["b_packets"], counter, float64(b.Packets), bl...)
		}
		ch <- prometheus.MustNewConstMetric(c.descs["b_out"], counter, float64(b.BytesOut), bl...)
		ch <- prometheus.MustNewConstMetric(c.descs["b_up"], gauge, up, bl...)
		ch <- prometheus.MustNewConstMetric(c.descs["b_rtt"], gauge, b.RTT.Seconds(), bl...)
		ch <- prometheus.MustNewConstMetric(c.descs["b_weight"], gauge, float64(b.Weight), bl...)
		if lag, ok := lagGauge(b.ReplicaLag); ok {
			ch <- prometheus.MustNewConstMetric(c.descs["b_lag"], gauge, lag, bl...)
		}
		if !xdp {
			ch <- prometheus.MustNewConstMetric(c.descs["b_max"], gauge, float64(b.MaxFlows), bl...)
		}
	}
}

// lagGauge is a replica lag's value, +Inf when unknown; false: none read.
func lagGauge(l plane.ReplicaLag) (float64, bool) {
	switch {
	case l.Seconds != nil:
		return *l.Seconds, true
	case l.Unknown != "":
		return math.Inf(1), true
	}
	return 0, false
}

// boolGauge is a gauge's value for a yes/no state.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectBGP reports the sessions, the routes and which VIPs they cover.
func (c *statusCollector) collectBGP(ch chan<- prometheus.Metric, st plane.Status) {
	b := st.BGP
	if b == nil {
		return
	}
	for _, p := range b.Peers {
		ch <- prometheus.MustNewConstMetric(c.descs["bgp_peer_up"], prometheus.GaugeValue, boolGauge(p.Up), p.Address)
		ch <- prometheus.MustNewConstMetric(c.descs["bgp_sent"], prometheus.GaugeValue, float64(p.PrefixesSent), p.Address)
		if f := p.BFD; f != nil {
			ch <- prometheus.MustNewConstMetric(c.descs["bfd_up"], prometheus.GaugeValue, boolGauge(f.State == "up"), p.Address)
			ch <- prometheus.MustNewConstMetric(c.descs["bfd_state"], prometheus.GaugeValue, bfdStateValue(f.State), p.Address)
			ch <- prometheus.MustNewConstMetric(c.descs["bfd_downs"], prometheus.CounterValue, float64(f.Downs), p.Address)
			ch <- prometheus.MustNewConstMetric(c.descs["bfd_sent"], prometheus.CounterValue, float64(f.Sent), p.Address)
			ch <- prometheus.MustNewConstMetric(c.descs["bfd_recv"], prometheus.CounterValue, float64(f.Received), p.Address)
			ch <- prometheus.MustNewConstMetric(c.descs["bfd_resets"], prometheus.CounterValue, float64(f.BGPResets), p.Address)
		}
	}
	if d := b.BFDDropped; d != nil {
		ch <- prometheus.MustNewConstMetric(c.descs["bfd_dropped"], prometheus.CounterValue, float64(d.Malformed), "malformed")
		ch <- prometheus.MustNewConstMetric(c.descs["bfd_dropped"], prometheus.CounterValue, float64(d.TTL), "ttl")
		ch <- prometheus.MustNewConstMetric(c.descs["bfd_dropped"], prometheus.CounterValue, float64(d.NoSession), "no_session")
	}
	ch <- prometheus.MustNewConstMetric(c.descs["bgp_routes"], prometheus.GaugeValue, float64(len(b.Announced)))
	seen := map[[2]string]bool{}
	for _, v := range st.VIPs {
		ap, err := netip.ParseAddrPort(v.Listen)
		if v.Draining || err != nil || seen[[2]string{v.Name, v.Protocol}] {
			continue
		}
		seen[[2]string{v.Name, v.Protocol}] = true
		ch <- prometheus.MustNewConstMetric(c.descs["announced"], prometheus.GaugeValue, boolGauge(announcedAddr(b, ap.Addr())), v.Name, v.Protocol)
	}
}

// collectFlowSync reports flow sync's counters.
func (c *statusCollector) collectFlowSync(ch chan<- prometheus.Metric, f *plane.FlowSyncStatus) {
	if f == nil {
		return
	}
	counter := func(name string, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, float64(v), labels...)
	}
	counter("fs_sent", f.Sent)
	counter("fs_limited", f.SendRateLimited)
	for _, r := range []struct {
		v uint64
		l string
	}{{f.Installed, "installed"}, {f.Known, "known"}, {f.ForeignVIP, "foreign_vip"}, {f.UnknownBackend, "unknown_backend"},
		{f.InstallFailed, "failed"}, {f.InstallRateLimited, "rate_limited"}, {f.TableFull, "table_full"}} {
		counter("fs_recv", r.v, r.l)
	}
	for _, r := range []struct {
		v uint64
		l string
	}{{f.Malformed, "malformed"}, {f.BadVersion, "version"}, {f.BadAuth, "auth"}, {f.Replays, "replay"}} {
		counter("fs_dropped", r.v, r.l)
	}
	ch <- prometheus.MustNewConstMetric(c.descs["fs_peers"], prometheus.GaugeValue, float64(f.FromPeers))
}

// bfdStateValue is a BFD state's wire value (RFC 5880 section 4.1).
func bfdStateValue(s string) float64 {
	switch s {
	case "down":
		return 1
	case "init":
		return 2
	case "up":
		return 3
	}
	return 0
}

// announcedAddr reports whether addr's host route is announced.
func announcedAddr(st *plane.BGPStatus, addr netip.Addr) bool {
	if st == nil {
		return false
	}
	want := netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()).String()
	for _, p := range st.Announced {
		if p == want {
			return true
		}
	}
	return false
}

// Names are the l4lb_* series l4lb exports, each with its variable
// labels (besides the job and instance a scrape adds): the one list
// dashboards and alert rules may name (contrib/ is tested against it).
func Names() map[string][]string {
	out := map[string][]string{}
	for name, labels := range newStatusCollector(nil).labels {
		out[name] = append([]string(nil), labels...)
	}
	return out
}
