package metrics

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/l4lb/l4lb/l4/plane"
)

// Every kind of VIP and every optional block of a status collects without
// error, one series per VIP, also when a draining VIP shares its name with
// its running successor.
func TestMetricsCollectEveryStatus(t *testing.T) {
	st := plane.Status{
		Process: plane.ProcessStatus{Version: "v", LastReload: &plane.ReloadStatus{OK: true}},
		XDP:     &plane.XDPStatus{Interface: "eth0", Counters: map[string]uint64{"tx": 5, "drop_no_neigh": 1}},
		BGP: &plane.BGPStatus{ASN: 65001, Announced: []string{"198.18.0.10/32"},
			Peers: []plane.BGPPeerStatus{{Address: "198.18.0.1", ASN: 65000, State: "established", Up: true, PrefixesSent: 1}}},
		VIPs: []plane.VIPStatus{
			{Name: "t", Protocol: "tcp", Listen: "198.18.0.10:80", TCP: &plane.TCPStatus{LimitWaits: 2}, Backends: []plane.BackendStatus{{ID: "a", Address: "198.18.1.1:80"}},
				Names: []plane.NameStatus{{Backend: "p", Lookup: "pg.db:80", Addresses: []string{"198.18.1.1:80"}, AnswerAge: 2, Errors: 1},
					{Backend: "q", Lookup: "pg.db:80"}}},
			{Name: "t", Protocol: "tcp", Draining: true, TCP: &plane.TCPStatus{}},
			{Name: "u", Protocol: "udp", UDP: &plane.UDPStatus{Datagrams: 3}},
			{Name: "x", Protocol: "udp", XDP: &plane.XDPVIPStatus{Packets: 7}, Backends: []plane.BackendStatus{{ID: "b", Address: "198.18.1.2:53", Packets: 7}}},
			// SNI routes: a route's backend may share the VIP's backend's
			// name and address; its series are the VIP's "NAME/ROUTE".
			{Name: "s", Protocol: "tcp", TCP: &plane.TCPStatus{}, Backends: []plane.BackendStatus{{ID: "a", Address: "198.18.1.1:443"}},
				SNI: &plane.SNIStatus{NoMatch: "default", Timeouts: 2, Routes: []plane.RouteStatus{
					{Name: "api", Names: []string{"api.example.test"}, Routed: 5, Eligible: 1, Backends: []plane.BackendStatus{{ID: "a", Address: "198.18.1.1:443"}}}}}},
		},
	}
	families := gather(t, st)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"l4lb_vip_draining", "l4lb_vip_limit_waits_total", "l4lb_vip_udp_datagrams_total",
		"l4lb_vip_xdp_packets_total", "l4lb_xdp_events_total", "l4lb_backend_packets_total", "l4lb_last_reload_successful", "l4lb_build_info",
		"l4lb_dns_lookup_errors_total", "l4lb_dns_answer_age_seconds", "l4lb_dns_addresses",
		"l4lb_vip_sni_total", "l4lb_vip_route_connections_total", "l4lb_vip_route_eligible_backends",
		"l4lb_bgp_peer_up", "l4lb_bgp_peer_prefixes_sent", "l4lb_bgp_announced_prefixes", "l4lb_vip_announced"} {
		if !names[want] {
			t.Errorf("no %s among %d families", want, len(families))
		}
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "l4lb_vip_draining") && len(f.GetMetric()) != 4 {
			t.Errorf("%s: %d series, want one per VIP name (4)", f.GetName(), len(f.GetMetric()))
		}
		if f.GetName() == "l4lb_backend_live_flows" {
			vips := map[string]bool{}
			for _, m := range f.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "vip" {
						vips[lp.GetValue()] = true
					}
				}
			}
			if !vips["s"] || !vips["s/api"] {
				t.Errorf("backend series by vip: %v, want s and s/api", vips)
			}
		}
		if f.GetName() == "l4lb_vip_route_connections_total" && (len(f.GetMetric()) != 1 || f.GetMetric()[0].GetCounter().GetValue() != 5) {
			t.Errorf("%s: %v", f.GetName(), f.GetMetric())
		}
	}
}

// A replica's lag is a gauge: its seconds, +Inf when unknown, and no
// series for a backend whose check reads none.
func TestMetricsReplicaLag(t *testing.T) {
	secs := 1.5
	st := plane.Status{VIPs: []plane.VIPStatus{{Name: "pg", Protocol: "tcp", TCP: &plane.TCPStatus{}, Backends: []plane.BackendStatus{
		{ID: "r1", Address: "198.18.1.1:5432", ReplicaLag: plane.ReplicaLag{Seconds: &secs}},
		{ID: "r2", Address: "198.18.1.2:5432", ReplicaLag: plane.ReplicaLag{Unknown: "no WAL receiver"}},
		{ID: "p", Address: "198.18.1.3:5432"},
	}}}}
	got := map[string]float64{}
	for _, f := range gather(t, st) {
		if f.GetName() != "l4lb_backend_replica_lag_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "backend" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if len(got) != 2 || got["r1"] != 1.5 || !math.IsInf(got["r2"], 1) {
		t.Errorf("replica lag series %v, want r1 1.5 and r2 +Inf only", got)
	}
}

// gather collects st as a scrape would.
func gather(t *testing.T, st plane.Status) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStatusCollector(func() plane.Status { return st }))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return families
}
