// The config-to-plane mapping, field by field: every setting a VIP or
// backend maps onto a data plane's settings (proxy.TCPPlaneSettings,
// proxy.UDPPlaneSettings, balance.Options, the backend caps, the health
// spec) arrives there, so a setting dropped on the way fails here
// and not only in whichever end-to-end test happens to lean on it.

package reconcile

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/health"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/xdpplane"
)

// planeView is everything the mapping produces for one VIP and its first
// backend, by the names the rows below use as paths.
type planeView struct {
	TCP     proxy.TCPPlaneSettings
	UDP     proxy.UDPPlaneSettings
	Balance balance.Options
	XDP     xdpplane.VIPOptions
	Guard   xdpplane.GuardOptions
	TCPCap  int64 // the backend's cap as a tcp VIP's
	TCPRate int64 // the backend's max_conn_rate as a tcp VIP's
	UDPRate int64 // ... as a udp VIP's (none)
	UDPCap  int64 // the backend's cap as a udp VIP's
	Health  health.Spec
}

func viewOf(t *testing.T, vc *config.VIP) planeView {
	t.Helper()
	opts, err := balanceOptions(vc)
	if err != nil {
		t.Fatal(err)
	}
	tcp, udp := *vc, *vc
	tcp.Protocol, udp.Protocol = l4.TCP, l4.UDP
	return planeView{
		TCP: tcpSettings(vc), UDP: udpSettings(vc), Balance: opts, XDP: vipOptions(vc), Guard: guardOptions(vc),
		TCPCap: backendCap(&tcp, &vc.Backends[0]), UDPCap: backendCap(&udp, &vc.Backends[0]),
		TCPRate: backendRate(&tcp, &vc.Backends[0]), UDPRate: backendRate(&udp, &vc.Backends[0]),
		Health: healthSpec(vc.Health, vc.LeastTimeMetric),
	}
}

// defaultVIP is a VIP with every key at its default, as config makes it.
func defaultVIP(t *testing.T) config.VIP {
	t.Helper()
	cfg := parse(t, `
[[vip]]
name = "v"
listen = "198.18.0.10:80"
  [[vip.backend]]
  address = "198.18.1.11:80"
`)
	vc := cfg.VIPs[0]
	vc.Backends = slices.Clone(vc.Backends)
	return vc
}

// mappingRow sets one config key (or a few that only mean something
// together) on a default VIP and names where the value must arrive.
type mappingRow struct {
	key  string
	set  func(v *config.VIP)
	path string // a leaf of planeView, "Settings.MaxConns"
	want any    // its value; or check it with check
	// check, when set, judges the leaf instead of want.
	check func(got any) error
	// sameAsDefault: the row checks a rule whose answer is the default's
	// (first_byte turns MeasureConnect back off), not a value carried over.
	sameAsDefault bool
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

var mappingRows = []mappingRow{
	// Every VIP.
	{key: "name", set: func(v *config.VIP) { v.Name = "renamed" }, path: "TCP.Service.Name", want: "renamed"},
	{key: "name", set: func(v *config.VIP) { v.Name = "renamed" }, path: "UDP.Service.Name", want: "renamed"},
	{key: "log_connections", set: func(v *config.VIP) { v.LogConnections = true }, path: "TCP.Service.LogConnections", want: true},
	{key: "log_connections", set: func(v *config.VIP) { v.LogConnections = true }, path: "UDP.Service.LogConnections", want: true},
	{key: "log_connections_rate", set: func(v *config.VIP) { v.LogConnectionsRate = 77 }, path: "TCP.Service.LogRate", want: 77},
	{key: "log_connections_rate", set: func(v *config.VIP) { v.LogConnectionsRate = 77 }, path: "UDP.Service.LogRate", want: 77},
	{key: "deny", set: func(v *config.VIP) { v.Deny = prefixes("198.18.0.64/26") }, path: "TCP.Lists.Deny", want: prefixes("198.18.0.64/26")},
	{key: "deny", set: func(v *config.VIP) { v.Deny = prefixes("198.18.0.64/26") }, path: "UDP.Lists.Deny", want: prefixes("198.18.0.64/26")},
	{key: "allow", set: func(v *config.VIP) { v.Allow = prefixes("198.18.0.0/26") }, path: "TCP.Lists.Allow", want: prefixes("198.18.0.0/26")},
	{key: "allow", set: func(v *config.VIP) { v.Allow = prefixes("198.18.0.0/26") }, path: "UDP.Lists.Allow", want: prefixes("198.18.0.0/26")},
	{key: "freebind", set: func(v *config.VIP) { v.Freebind = true }, path: "TCP.Freebind", want: true},
	{key: "freebind", set: func(v *config.VIP) { v.Freebind = true }, path: "UDP.Freebind", want: true},
	{key: "conn_rate_per_client", set: func(v *config.VIP) { v.ConnRatePerClient = 33 }, path: "TCP.Service.ClientLimits.Rate", want: 33},
	{key: "conn_rate_per_client", set: func(v *config.VIP) { v.ConnRatePerClient = 33 }, path: "UDP.Service.ClientLimits.Rate", want: 33},

	{key: "deny", set: func(v *config.VIP) { v.Deny = prefixes("198.18.0.64/26") }, path: "XDP.Deny", want: prefixes("198.18.0.64/26")},
	{key: "allow", set: func(v *config.VIP) { v.Allow = prefixes("198.18.0.0/26") }, path: "XDP.Allow", want: prefixes("198.18.0.0/26")},
	{key: "deny", set: func(v *config.VIP) { v.Deny = prefixes("198.18.0.64/26") }, path: "Guard.Deny", want: prefixes("198.18.0.64/26")},
	{key: "allow", set: func(v *config.VIP) { v.Allow = prefixes("198.18.0.0/26") }, path: "Guard.Allow", want: prefixes("198.18.0.0/26")},

	// Balancing.
	{key: "algorithm", set: func(v *config.VIP) { v.Algorithm = l4.P2C }, path: "Balance.Algorithm", want: l4.P2C},
	{key: "hash_key", set: func(v *config.VIP) { v.Algorithm, v.HashKey = l4.Maglev, l4.HashFiveTuple }, path: "Balance.HashKey", want: l4.HashFiveTuple},
	{key: "maglev_table_size", set: func(v *config.VIP) { v.Algorithm, v.MaglevTableSize = l4.Maglev, 1009 }, path: "Balance.MaglevSize", want: uint32(1009)},
	{key: "hash_balance_factor", set: func(v *config.VIP) { v.Algorithm, v.HashBalanceFactor = l4.SourceHash, 125 }, path: "Balance.BalanceFactor", want: uint32(125)},
	{key: "least_time_default", set: func(v *config.VIP) { v.Algorithm, v.LeastTimeDefault = l4.LeastTime, 7*time.Millisecond }, path: "Balance.LeastTimeDefault", want: 7 * time.Millisecond},
	{key: "least_time_bias", set: func(v *config.VIP) { v.Algorithm, v.LeastTimeBias = l4.LeastTime, 0 }, path: "Balance.LeastTimeBias", want: time.Duration(0)},
	{key: "least_time_bias", set: func(v *config.VIP) { v.Algorithm, v.LeastTimeBias = l4.LeastTime, 3*time.Millisecond }, path: "Balance.LeastTimeBias", want: 3 * time.Millisecond},
	{key: "algorithm = least_time, least_time_metric = connect", set: func(v *config.VIP) { v.Algorithm = l4.LeastTime },
		path: "TCP.Service.MeasureConnect", want: true},
	{key: "least_time_metric = first_byte", set: func(v *config.VIP) { v.Algorithm, v.LeastTimeMetric = l4.LeastTime, l4.MetricFirstByte },
		path: "TCP.Service.MeasureConnect", want: false, sameAsDefault: true},
	{key: "least_time_metric", set: func(v *config.VIP) { v.Algorithm, v.LeastTimeMetric = l4.LeastTime, l4.MetricFirstByte }, path: "Health.Metric", want: l4.MetricFirstByte},

	// TCP proxy.
	{key: "connect_timeout", set: func(v *config.VIP) { v.ConnectTimeout = 750 * time.Millisecond }, path: "TCP.Service.ConnectTimeout", want: 750 * time.Millisecond},
	{key: "retries", set: func(v *config.VIP) { v.Retries = 7 }, path: "TCP.Service.Retries", want: 7},
	{key: "retry_on_reset", set: func(v *config.VIP) { v.RetryOnReset = l4.RetryResetUnanswered }, path: "TCP.Service.RetryOnReset", want: l4.RetryResetUnanswered},
	{key: "idle_timeout", set: func(v *config.VIP) { v.IdleTimeout = 90 * time.Second }, path: "TCP.Service.IdleTimeout", want: 90 * time.Second},
	{key: "keepalive", set: func(v *config.VIP) { v.KeepAlive = 40 * time.Second }, path: "TCP.Service.KeepAlive", want: 40 * time.Second},
	{key: "defer_accept", set: func(v *config.VIP) { v.DeferAccept = true }, path: "TCP.DeferAccept", want: true},
	{key: "max_conns", set: func(v *config.VIP) { v.MaxConns = 1234 }, path: "TCP.Service.MaxConns", want: 1234},
	{key: "proxy_protocol = v1", set: func(v *config.VIP) { v.ProxyProtocol = l4.ProxyV1 }, path: "TCP.Service.ProxyProtocol", want: l4.ProxyV1},
	{key: "proxy_protocol = v2", set: func(v *config.VIP) { v.ProxyProtocol = l4.ProxyV2 }, path: "TCP.Service.ProxyProtocol", want: l4.ProxyV2},
	{key: "app_protocol = postgres", set: func(v *config.VIP) { v.AppProtocol = l4.AppPostgres }, path: "TCP.Service.AppProtocol", want: l4.AppPostgres},
	{key: "accept_proxy_protocol = v1", set: func(v *config.VIP) { v.AcceptProxyProtocol = l4.AcceptProxyV1 }, path: "TCP.Service.AcceptProxy", want: proxy.AcceptProxyV1},
	{key: "accept_proxy_protocol = v2", set: func(v *config.VIP) { v.AcceptProxyProtocol = l4.AcceptProxyV2 }, path: "TCP.Service.AcceptProxy", want: proxy.AcceptProxyV2},
	{key: "accept_proxy_protocol = any", set: func(v *config.VIP) { v.AcceptProxyProtocol = l4.AcceptProxyAny }, path: "TCP.Service.AcceptProxy", want: proxy.AcceptProxyAny},
	{key: "accept_proxy_protocol_from", set: func(v *config.VIP) { v.AcceptProxyProtocolFrom = prefixes("198.18.5.0/24") },
		path: "TCP.Service.AcceptProxyFrom", want: prefixes("198.18.5.0/24")},
	{key: "first_byte_timeout", set: func(v *config.VIP) { v.FirstByteTimeout = 1500 * time.Millisecond }, path: "TCP.Service.FirstByteTimeout", want: 1500 * time.Millisecond},
	{key: "stall_timeout", set: func(v *config.VIP) { v.StallTimeout = 2 * time.Second }, path: "TCP.Service.StallTimeout", want: 2 * time.Second},
	{key: "kernel_forwarding = auto", set: func(v *config.VIP) { v.KernelForwarding = l4.KernelFwdAuto }, path: "TCP.Service.KernelForward", want: true},
	{key: "queue_timeout", set: func(v *config.VIP) { v.QueueTimeout = 250 * time.Millisecond }, path: "TCP.Service.QueueTimeout", want: 250 * time.Millisecond},
	{key: "failover_hold", set: func(v *config.VIP) { v.FailoverHold = 5 * time.Second }, path: "TCP.Service.FailoverHold", want: 5 * time.Second},
	{key: "affinity_timeout", set: func(v *config.VIP) { v.AffinityTimeout = 3 * time.Second }, path: "TCP.Service.AffinityTimeout", want: 3 * time.Second},
	{key: "max_conns_per_client", set: func(v *config.VIP) { v.MaxConnsPerClient = 5 }, path: "TCP.Service.ClientLimits.MaxOpen", want: 5},

	// XDP.
	{key: "hash_key (xdp)", set: func(v *config.VIP) { v.HashKey = l4.HashFiveTuple }, path: "XDP.HashKey", want: l4.HashFiveTuple},
	{key: "forward", set: func(v *config.VIP) { v.Forward = l4.ForwardL2 }, path: "XDP.Forward", want: l4.ForwardL2},
	{key: "new_flow_rate", set: func(v *config.VIP) { v.NewFlowRate = 5000 }, path: "XDP.NewFlowRate", want: 5000},
	{key: "maglev_table_size (xdp)", set: func(v *config.VIP) { v.MaglevTableSize = 1009 }, path: "XDP.MaglevTableSize", want: 1009},
	{key: "session_timeout (xdp)", set: func(v *config.VIP) { v.SessionTimeout = 12 * time.Second }, path: "XDP.SessionTimeout", want: 12 * time.Second},
	{key: "algorithm (xdp)", set: func(v *config.VIP) { v.Algorithm = l4.LeastConn }, path: "XDP.Algorithm", want: l4.LeastConn},

	// UDP.
	{key: "session_timeout", set: func(v *config.VIP) { v.SessionTimeout = 12 * time.Second }, path: "UDP.Service.SessionTimeout", want: 12 * time.Second},
	{key: "max_sessions", set: func(v *config.VIP) { v.MaxSessions = 999 }, path: "UDP.Service.MaxSessions", want: 999},
	{key: "udp_responses", set: func(v *config.VIP) { v.UDPResponses = 2 }, path: "UDP.Service.Responses", want: 2},
	{key: "max_sessions_per_client", set: func(v *config.VIP) { v.MaxSessionsPerClient = 4 }, path: "UDP.Service.ClientLimits.MaxOpen", want: 4},

	// The backend.
	{key: "backend max_conns", set: func(v *config.VIP) { v.Backends[0].MaxConns = 11 }, path: "TCPCap", want: int64(11)},
	{key: "backend max_conn_rate", set: func(v *config.VIP) { v.Backends[0].MaxConnRate = 1000 }, path: "TCPRate", want: int64(1000)},
	{key: "backend max_conn_rate on udp", set: func(v *config.VIP) { v.Backends[0].MaxConnRate = 1000 }, path: "UDPRate", want: int64(0), sameAsDefault: true},
	{key: "backend max_conn_rate in xdp mode", set: func(v *config.VIP) { v.Mode, v.Backends[0].MaxConnRate = l4.ModeXDP, 1000 },
		path: "TCPRate", want: int64(0), sameAsDefault: true},
	{key: "backend max_sessions", set: func(v *config.VIP) { v.Backends[0].MaxSessions = 13 }, path: "UDPCap", want: int64(13)},
	{key: "backend max_conns in xdp mode", set: func(v *config.VIP) { v.Mode, v.Backends[0].MaxConns = l4.ModeXDP, 11 },
		path: "TCPCap", want: int64(0), sameAsDefault: true},

	// The health check.
	{key: "health.type", set: func(v *config.VIP) { v.Health.Type = l4.CheckHTTP }, path: "Health.Type", want: l4.CheckHTTP},
	{key: "health.interval", set: func(v *config.VIP) { v.Health.Interval = 700 * time.Millisecond }, path: "Health.Interval", want: 700 * time.Millisecond},
	{key: "health.timeout", set: func(v *config.VIP) { v.Health.Timeout = 300 * time.Millisecond }, path: "Health.Timeout", want: 300 * time.Millisecond},
	{key: "health.rise", set: func(v *config.VIP) { v.Health.Rise = 5 }, path: "Health.Rise", want: 5},
	{key: "health.fall", set: func(v *config.VIP) { v.Health.Fall = 6 }, path: "Health.Fall", want: 6},
	{key: "health.port", set: func(v *config.VIP) { v.Health.Port = 8081 }, path: "Health.Port", want: uint16(8081)},
	{key: "health.max_fails", set: func(v *config.VIP) { v.Health.MaxFails = 9 }, path: "Health.MaxFails", want: 9},
	{key: "health.fail_timeout", set: func(v *config.VIP) { v.Health.FailTimeout = 4 * time.Second }, path: "Health.FailTimeout", want: 4 * time.Second},
	{key: "health.send", set: func(v *config.VIP) { v.Health.Send = []byte("PING\r\n") }, path: "Health.Send", want: []byte("PING\r\n")},
	{key: "health.expect", set: func(v *config.VIP) { v.Health.Expect = []byte("+PONG") }, path: "Health.Expect", want: []byte("+PONG")},
	{key: "health.expect_regex", set: func(v *config.VIP) { v.Health.ExpectRegex = "^OK" }, path: "Health.ExpectRegex", want: "^OK"},
	{key: "health.path", set: func(v *config.VIP) { v.Health.Path = "/healthz" }, path: "Health.Path", want: "/healthz"},
	{key: "health.host", set: func(v *config.VIP) { v.Health.Host = "db.example" }, path: "Health.Host", want: "db.example"},
	{key: "health.status", set: func(v *config.VIP) { v.Health.Status = 204 }, path: "Health.Status", want: 204},
	{key: "health.websocket", set: func(v *config.VIP) { v.Health.WebSocket = true }, path: "Health.WebSocket", want: true},
	{key: "health.user", set: func(v *config.VIP) { v.Health.User = "probe" }, path: "Health.User", want: "probe"},
	{key: "health.password", set: func(v *config.VIP) { v.Health.Password = "secret" }, path: "Health.Password", want: "secret"},
	{key: "health.database", set: func(v *config.VIP) { v.Health.Database = "app" }, path: "Health.Database", want: "app"},
	{key: "health.role", set: func(v *config.VIP) { v.Health.Role = l4.RolePrimary }, path: "Health.Role", want: l4.RolePrimary},
	{key: "health.max_lag", set: func(v *config.VIP) { v.Health.MaxLag = 3 * time.Second }, path: "Health.MaxLag", want: 3 * time.Second},
	{key: "health.send_proxy", set: func(v *config.VIP) { v.Health.SendProxy = l4.ProxyV2 }, path: "Health.ProxyHeader", want: l4.ProxyV2},
	{key: "health.dns_name", set: func(v *config.VIP) { v.Health.DNSName = "db.example" }, path: "Health.DNSName", want: "db.example"},
	{key: "health.dns_type", set: func(v *config.VIP) { v.Health.DNSType = l4.DNSTypeAAAA }, path: "Health.DNSType", want: uint16(28)},
	{key: "health.tls_server_name", set: func(v *config.VIP) { v.Health.TLSServerName = "db.example" }, path: "Health.TLSServerName", want: "db.example"},
	{key: "health.tls_verify", set: func(v *config.VIP) { v.Health.TLSVerify = true }, path: "Health.TLSVerify", want: true},
	{key: "health.agent_port", set: func(v *config.VIP) { v.Health.AgentPort = 5555 }, path: "Health.Agent.Port", want: uint16(5555)},
	{key: "health.agent_interval", set: func(v *config.VIP) { v.Health.AgentInterval = 3 * time.Second }, path: "Health.Agent.Interval", want: 3 * time.Second},
	{key: "health.agent_timeout", set: func(v *config.VIP) { v.Health.AgentTimeout = 300 * time.Millisecond }, path: "Health.Agent.Timeout", want: 300 * time.Millisecond},
	{key: "health.agent_send", set: func(v *config.VIP) { v.Health.AgentSend = []byte("hi\n") }, path: "Health.Agent.Send", want: []byte("hi\n")},
}

// notMapped are the plane's settings no config key sets, with the reason.
var notMapped = map[string]string{
	"Health.PostgresSSLMode": "no config key: probes always use the default (prefer)",
	"Health.Route.Addr":      "no config key: the XDP plane's probe route (syncHealth asks plane.ProbeRouter per backend)",
	"Health.Route.Source":    "no config key: the XDP plane's probe route",
	"Health.Route.Mark":      "no config key: the XDP plane's probe route",
	"TCP.Service.Access":     "built by the plane from TCP.Lists",
	"UDP.Service.Access":     "built by the plane from UDP.Lists",
}

// leaf returns the value at a dotted path of v.
func leaf(v reflect.Value, path string) (reflect.Value, bool) {
	for _, name := range strings.Split(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		if v = v.FieldByName(name); !v.IsValid() {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// leafPaths lists the exported leaves of t: fields that are not structs
// (a pointer, such as the ACL, is a leaf).
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue // test seams (queuePoll), not settings
		}
		p := prefix + f.Name
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
			out = append(out, leafPaths(f.Type, p+".")...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// TestConfigToPlaneMapping: each row's non-default value arrives where
// the data plane reads it, and every leaf of the plane's settings is
// covered by a row (or listed in notMapped with its reason): a mapping
// that drops a field, or a new plane setting nobody maps, fails here.
func TestConfigToPlaneMapping(t *testing.T) {
	base := defaultVIP(t)
	def := reflect.ValueOf(viewOf(t, &base))
	for _, r := range mappingRows {
		t.Run(r.key+"->"+r.path, func(t *testing.T) {
			vc := base
			vc.Backends = slices.Clone(base.Backends)
			r.set(&vc)
			got, ok := leaf(reflect.ValueOf(viewOf(t, &vc)), r.path)
			if !ok {
				t.Fatalf("no field %s in the plane's settings", r.path)
			}
			if r.check != nil {
				if err := r.check(got.Interface()); err != nil {
					t.Fatalf("%s did not reach %s: %v", r.key, r.path, err)
				}
			} else if !reflect.DeepEqual(got.Interface(), r.want) {
				t.Fatalf("%s did not reach %s: got %#v, want %#v", r.key, r.path, got.Interface(), r.want)
			}
			old, _ := leaf(def, r.path)
			if r.sameAsDefault {
				return
			}
			if r.check == nil && reflect.DeepEqual(old.Interface(), r.want) {
				t.Fatalf("row %s: %#v is %s's default value: it cannot show the value arrives", r.key, r.want, r.path)
			}
			if r.check != nil && r.check(old.Interface()) == nil {
				t.Fatalf("row %s: the default VIP passes the check too: it cannot show the value arrives", r.key)
			}
		})
	}

	covered := map[string]bool{}
	for _, r := range mappingRows {
		covered[r.path] = true
	}
	for _, p := range leafPaths(reflect.TypeFor[planeView](), "") {
		if !covered[p] && notMapped[p] == "" {
			t.Errorf("%s: no row maps a config value onto it (add one, or say in notMapped why nothing does)", p)
		}
	}
}

// TestXDPOptionsMapping: every [xdp] key the program reads arrives in its
// options, and only there.
func TestXDPOptionsMapping(t *testing.T) {
	cfg := parse(t, `
[xdp]
interface = ["veth9", "veth8"]
attach = "generic"
pin_path = "/sys/fs/bpf/l4lb-test"
conntrack_size = 4096
weight_refresh = "7s"
syn_rate_per_source = 40
source_prefix4 = "198.18.200.0/24"
source_prefix6 = "2001:db8:200::/64"
gue_port = 6081
nat_source4 = "198.18.0.9"
nat_source6 = "2001:db8::9"
nat_port_min = 2000
nat_port_max = 2999
nat_tcp_timeout = "1h"
nat_udp_timeout = "10s"
[[vip]]
name = "x"
listen = "198.18.100.1:80"
mode = "xdp"
  [[vip.backend]]
  address = "198.18.10.11:80"
`)
	want := xdpplane.Options{Interfaces: []string{"veth9", "veth8"}, Attach: l4.AttachGeneric, PinPath: "/sys/fs/bpf/l4lb-test", ConntrackSize: 4096,
		WeightRefresh: 7 * time.Second, SYNRatePerSource: 40, SourcePrefix4: netip.MustParsePrefix("198.18.200.0/24"),
		SourcePrefix6: netip.MustParsePrefix("2001:db8:200::/64"), GUEPort: 6081,
		NAT: xdpplane.NATOptions{Source4: netip.MustParseAddr("198.18.0.9"), Source6: netip.MustParseAddr("2001:db8::9"),
			PortMin: 2000, PortMax: 2999, TCPTimeout: time.Hour, UDPTimeout: 10 * time.Second}}
	if got := xdpOptions(cfg.XDP); !reflect.DeepEqual(got, want) {
		t.Fatalf("xdp options %+v, want %+v", got, want)
	}
	cfg.XDP.Attach = l4.AttachDriver
	if xdpOptions(cfg.XDP).Attach != l4.AttachDriver {
		t.Fatal("attach = driver mapped to generic")
	}
}
