// Table tests: one case per validation problem, checking key, line and VIP.

package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
)

// marker ends the line a problem must be reported at.
const marker = "# <-"

// oneVIP is a valid single-VIP file with extra appended to the VIP table
// (extra may open [vip.health]); its backend comes last.
func oneVIP(extra string) string {
	return `[[vip]]
name = "pg"
listen = "198.18.0.10:5432"
` + extra + `
  [[vip.backend]]
  address = "198.18.1.11:5432"
`
}

// markerLine returns the 1-based line of the marker in src.
func markerLine(t *testing.T, src string) int {
	t.Helper()
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, marker) {
			return i + 1
		}
	}
	t.Fatalf("no %q marker in:\n%s", marker, src)
	return 0
}

type problemCase struct {
	name string
	src  string
	key  string // Problem.Key
	vip  string // Problem.VIP
	msg  string // part of Problem.Msg
}

// run parses c.src and wants a problem with c's key, VIP, message and the
// marker's line, also in the formatted error.
func (c problemCase) run(t *testing.T) {
	t.Helper()
	_, err := config.Parse("test.toml", []byte(c.src))
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Parse error = %v, want *config.Error", err)
	}
	line := markerLine(t, c.src)
	for _, p := range cerr.Problems {
		if p.Key == c.key && p.Line == line && p.VIP == c.vip && strings.Contains(p.Msg, c.msg) {
			text := err.Error()
			want := fmt.Sprintf("test.toml:%d: ", line)
			if !strings.Contains(text, want) || !strings.Contains(text, c.key+": ") {
				t.Errorf("Error() = %q, want %q and the key", text, want)
			}
			if c.vip != "" && !strings.Contains(text, fmt.Sprintf("vip %q", c.vip)) {
				t.Errorf("Error() = %q does not name vip %q", text, c.vip)
			}
			return
		}
	}
	t.Errorf("want problem at line %d, key %s, vip %q, msg ~%q; got:\n%v", line, c.key, c.vip, c.msg, err)
}

func TestGlobalProblems(t *testing.T) {
	g := func(kv string) string { return "[global]\n" + kv + " " + marker + "\n" + oneVIP("") }
	for _, c := range []problemCase{
		{"log_level", g(`log_level = "loud"`), "global.log_level", "", `"loud" is not one of debug, info, warn, error`},
		{"log_format", g(`log_format = "xml"`), "global.log_format", "", "not one of console, json"},
		{"admin_socket relative", g(`admin_socket = "admin.sock"`), "global.admin_socket", "", "absolute path"},
		{"admin_socket long", g(`admin_socket = "/` + strings.Repeat("a", 120) + `"`), "global.admin_socket", "", "at most 107"},
		{"admin_socket empty", g(`admin_socket = ""`), "global.admin_socket", "", `or "off"`},
		{"metrics_listen", g(`metrics_listen = "9370"`), "global.metrics_listen", "", "not host:port"},
		{"metrics_listen port", g(`metrics_listen = "127.0.0.1:http"`), "global.metrics_listen", "", "not host:port"},
		{"drain_timeout range", g(`drain_timeout = "2h"`), "global.drain_timeout", "", "2h is out of range 0s..1h"},
		{"drain_timeout negative", g(`drain_timeout = "-1s"`), "global.drain_timeout", "", "must not be negative"},
		{"drain_timeout syntax", g(`drain_timeout = "30 s"`), "global.drain_timeout", "", "not a duration"},
		// D21: a bare number is refused with the unit to write, as a
		// string or a TOML integer ("0" alone needs none).
		{"drain_timeout no unit", g(`drain_timeout = "2"`), "global.drain_timeout", "", `"2" has no unit: write "2s" for seconds or "2ms" for milliseconds`},
		{"drain_timeout type", g(`drain_timeout = 30`), "global.drain_timeout", "", `must be a duration string, not the number 30: write "30s" for seconds`},
		{"resolve_min integer 0", g(`resolve_min = 0`), "global.resolve_min", "", "0 is out of range 100ms..1h"},
		{"pipe_size small", g(`pipe_size = 1024`), "global.pipe_size", "", "1024 is out of range 4096..16777216"},
		{"pipe_size type", g(`pipe_size = "1M"`), "global.pipe_size", "", "must be an integer, not a string"},
		{"max_pipes negative", g(`max_pipes = -1`), "global.max_pipes", "", "-1 is out of range 0..4194304"},
		{"workers too many", g(`workers = 1025`), "global.workers", "", "1025 is out of range 0..1024"},
		{"busy_poll too long", g(`busy_poll = "2ms"`), "global.busy_poll", "", "out of range 0s..1ms"},
		{"resolvers", g(`resolvers = ["dns.example"]`), "global.resolvers", "", "is not ip or ip:port"},
		{"resolvers type", g(`resolvers = [53]`), "global.resolvers", "", "[0] must be an address"},
		{"resolve_min range", g(`resolve_min = "10ms"`), "global.resolve_min", "", "out of range 100ms..1h"},
		{"resolve_min above max", g(`resolve_min = "10m"`), "global.resolve_min", "", "is above resolve_max 5m"},
	} {
		t.Run(c.name, c.run)
	}
}

func TestVIPProblems(t *testing.T) {
	v := func(kv string) string { return oneVIP(kv + " " + marker) }
	for _, c := range []problemCase{
		{"name missing", "[[vip]] " + marker + "\nlisten = \"198.18.0.10:5432\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].name", "", "is required"},
		{"name type", "[[vip]]\nname = 1 " + marker + "\nlisten = \"198.18.0.10:5432\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].name", "", "must be a string, not an integer"},
		{"empty duration", v(`connect_timeout = ""`), "vip[0].connect_timeout", "pg", `"" is not a duration`},
		{"name chars", "[[vip]]\nname = \"p g\" " + marker + "\nlisten = \"198.18.0.10:5432\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].name", "p g", "must be 1 to 64"},
		{"name long", "[[vip]]\nname = \"" + strings.Repeat("n", 65) + "\" " + marker + "\nlisten = \"198.18.0.10:5432\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].name", strings.Repeat("n", 65), "must be 1 to 64"},
		// D6: the admin API could never reach these (/vips/../drain).
		{"name dot", "[[vip]]\nname = \".\" " + marker + "\nlisten = \"198.18.0.10:5432\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].name", ".", `and not "." or ".." (names are path segments of the admin API)`},
		{"name dot dot", "[[vip]]\nname = \"..\" " + marker + "\nlisten = \"198.18.0.10:5432\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].name", "..", `not "." or ".."`},
		{"listen missing", "[[vip]] " + marker + "\nname = \"pg\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].listen", "pg", "is required"},
		{"listen syntax", "[[vip]]\nname = \"pg\"\nlisten = \"198.18.0.10\" " + marker + "\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].listen", "pg", "is not ip:port"},
		{"listen port 0", "[[vip]]\nname = \"pg\"\nlisten = \"198.18.0.10:0\" " + marker + "\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].listen", "pg", "port must not be 0"},
		{"listen zone", "[[vip]]\nname = \"pg\"\nlisten = \"[fe80::1%eth0]:80\" " + marker + "\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].listen", "pg", "zoned"},
		{"listen multicast", "[[vip]]\nname = \"pg\"\nlisten = \"224.0.0.1:80\" " + marker + "\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
			"vip[0].listen", "pg", "multicast"},
		{"protocol", v(`protocol = "sctp"`), "vip[0].protocol", "pg", `"sctp" is not one of tcp, udp`},
		{"mode", v(`mode = "kernel"`), "vip[0].mode", "pg", "not one of proxy, xdp"},
		{"algorithm", v(`algorithm = "fastest"`), "vip[0].algorithm", "pg", "not one of round_robin"},
		{"hash_key", v(`algorithm = "maglev"` + "\n" + `hash_key = "dst_ip"`), "vip[0].hash_key", "pg", "not one of src_ip, src_ip_port, 5tuple"},
		{"hash_balance_factor", v(`algorithm = "source_hash"` + "\n" + `hash_balance_factor = 50`), "vip[0].hash_balance_factor", "pg", "0 or 100..1000"},
		{"maglev not prime", v(`algorithm = "maglev"` + "\n" + `maglev_table_size = 65536`), "vip[0].maglev_table_size", "pg", "not a prime"},
		{"maglev range", v(`algorithm = "maglev"` + "\n" + `maglev_table_size = 997`), "vip[0].maglev_table_size", "pg", "out of range 1009..1000003"},
		{"maglev small", oneVIP(`algorithm = "maglev"`+"\n"+`maglev_table_size = 1009 `+marker) + manyBackends(10),
			"vip[0].maglev_table_size", "pg", "too small for 11 backends"},
		{"least_time_alpha 0", v(`algorithm = "least_time"` + "\n" + `least_time_alpha = 0`), "vip[0].least_time_alpha", "pg", "out of range (0, 1]"},
		{"least_time_alpha 1.5", v(`algorithm = "least_time"` + "\n" + `least_time_alpha = 1.5`), "vip[0].least_time_alpha", "pg", "out of range (0, 1]"},
		{"least_time_alpha type", v(`algorithm = "least_time"` + "\n" + `least_time_alpha = "high"`), "vip[0].least_time_alpha", "pg", "must be a number"},
		{"least_time_metric", v(`algorithm = "least_time"` + "\n" + `least_time_metric = "rtt"`), "vip[0].least_time_metric", "pg", "not one of connect, first_byte"},
		{"least_time_default", v(`algorithm = "least_time"` + "\n" + `least_time_default = "1m"`), "vip[0].least_time_default", "pg", "1m is out of range 1µs..10s"},
		{"connect_timeout", v(`connect_timeout = "10m"`), "vip[0].connect_timeout", "pg", "10m is out of range 1ms..5m"},
		{"retries", v(`retries = 16`), "vip[0].retries", "pg", "16 is out of range 0..15"},
		{"idle_timeout", v(`idle_timeout = "0s"`), "vip[0].idle_timeout", "pg", "out of range 1s..168h"},
		{"keepalive", v(`keepalive = "500ms"`), "vip[0].keepalive", "pg", "0 or 1s..2h"},
		{"defer_accept type", v(`defer_accept = 1`), "vip[0].defer_accept", "pg", "must be true or false"},
		{"first_byte_timeout range", v(`first_byte_timeout = "2h"`), "vip[0].first_byte_timeout", "pg", "0 or 1ms..1h"},
		{"first_byte_timeout small", v(`first_byte_timeout = "500us"`), "vip[0].first_byte_timeout", "pg", "0 or 1ms..1h"},
		{"first_byte_timeout type", v(`first_byte_timeout = 5`), "vip[0].first_byte_timeout", "pg", "must be"},
		{"first_byte_timeout on udp", v(`protocol = "udp"` + "\n" + `first_byte_timeout = "1s"`), "vip[0].first_byte_timeout", "pg", "applies only to tcp VIPs"},
		{"max_conns", v(`max_conns = -1`), "vip[0].max_conns", "pg", "out of range 0..10000000"},
		{"proxy_protocol", v(`proxy_protocol = "v3"`), "vip[0].proxy_protocol", "pg", "not one of off, v1, v2"},
		{"accept_proxy_protocol", v(`accept_proxy_protocol = "v3"`), "vip[0].accept_proxy_protocol", "pg", "not one of off, v1, v2, any"},
		{"accept_proxy_protocol without from", v(`accept_proxy_protocol = "any"`), "vip[0].accept_proxy_protocol", "pg", `"any" needs accept_proxy_protocol_from`},
		{"accept_proxy_protocol_from without accept", v(`accept_proxy_protocol_from = ["198.18.0.0/15"]`), "vip[0].accept_proxy_protocol_from", "pg", "applies only with accept_proxy_protocol on"},
		{"accept_proxy_protocol_from bad", v(`accept_proxy_protocol = "v2"` + "\n" + `accept_proxy_protocol_from = ["198.18.0.0/33"]`), "vip[0].accept_proxy_protocol_from", "pg", `[0] "198.18.0.0/33" is not a network`},
		{"accept_proxy_protocol_from host bits", v(`accept_proxy_protocol = "v2"` + "\n" + `accept_proxy_protocol_from = ["10.0.0.0/8", "198.18.0.1/15"]`), "vip[0].accept_proxy_protocol_from", "pg", `[1] "198.18.0.1/15" has host bits set (did you mean "198.18.0.0/15"?)`},
		{"accept_proxy_protocol_from type", v(`accept_proxy_protocol = "v2"` + "\n" + `accept_proxy_protocol_from = [10]`), "vip[0].accept_proxy_protocol_from", "pg", "[0] must be a network"},
		{"accept_proxy_protocol_from not array", v(`accept_proxy_protocol = "v2"` + "\n" + `accept_proxy_protocol_from = "10.0.0.0/8"`), "vip[0].accept_proxy_protocol_from", "pg", "must be an array of networks"},
		{"accept_proxy_protocol on udp", v(`protocol = "udp"` + "\n" + `accept_proxy_protocol = "v1"`), "vip[0].accept_proxy_protocol", "pg", "applies only to tcp VIPs"},
		{"affinity_timeout", v(`affinity_timeout = "48h"`), "vip[0].affinity_timeout", "pg", "out of range 0s..24h"},
		{"rebalance_rate", v(`rebalance_rate = 10001`), "vip[0].rebalance_rate", "pg", "out of range 0..10000"},
		{"rebalance_rate on udp", v(`protocol = "udp"` + "\n" + `rebalance_rate = 5`), "vip[0].rebalance_rate", "pg", "applies only to tcp VIPs in proxy mode"},
		{"allow bad", v(`allow = ["198.18.0.0/33"]`), "vip[0].allow", "pg", `[0] "198.18.0.0/33" is not a network`},
		{"deny host bits", v(`deny = ["198.18.0.1/24"]`), "vip[0].deny", "pg", `did you mean "198.18.0.0/24"`},
		{"allow and deny", v(`allow = ["198.18.0.0/15", "10.0.0.0/8"]` + "\n" + `deny = ["10.0.0.0/8"]`), "vip[0].deny", "pg", `[0] "10.0.0.0/8" is in allow too`},
		{"max_conns_per_client", v(`max_conns_per_client = -1`), "vip[0].max_conns_per_client", "pg", "out of range 0..10000000"},
		{"max_conns_per_client on udp", v(`protocol = "udp"` + "\n" + `max_conns_per_client = 5`), "vip[0].max_conns_per_client", "pg", "max_sessions_per_client"},
		{"max_sessions_per_client on tcp", v(`max_sessions_per_client = 5`), "vip[0].max_sessions_per_client", "pg", "applies only to udp VIPs in proxy mode"},
		{"conn_rate_per_client type", v(`conn_rate_per_client = "10/s"`), "vip[0].conn_rate_per_client", "pg", "must be an integer"},
		{"new_flow_rate on proxy", v(`new_flow_rate = 100`), "vip[0].new_flow_rate", "pg", "applies only to mode xdp"},
		{"backup_mode", v(`backup_mode = "any"`), "vip[0].backup_mode", "pg", "not one of first, all"},
		{"all backups", "[[vip]] " + marker + "\nname = \"pg\"\nlisten = \"198.18.0.10:5432\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\nbackup = true\n", "vip[0].backend", "pg", "at least one must be a primary"},
		{"backup type", oneVIP("") + "  backup = \"yes\" " + marker + "\n", "vip[0].backend[0].backup", "pg", "must be true or false"},
		{"session_timeout on tcp", v(`session_timeout = "10s"`), "vip[0].session_timeout", "pg", "applies only to udp VIPs"},
		{"queue_timeout range", v(`queue_timeout = "2h"`), "vip[0].queue_timeout", "pg", "0 or 1ms..1h"},
		{"queue_timeout type", v(`queue_timeout = 5`), "vip[0].queue_timeout", "pg", "must be"},
		{"queue_timeout on udp", v(`protocol = "udp"` + "\n" + `queue_timeout = "1s"`), "vip[0].queue_timeout", "pg", "applies only to tcp VIPs in proxy mode"},
		{"udp_responses on tcp", v(`udp_responses = 1`), "vip[0].udp_responses", "pg", "applies only to udp VIPs"},
		{"max_sessions on tcp", v(`max_sessions = 10`), "vip[0].max_sessions", "pg", "applies only to udp VIPs"},
		{"proxy_protocol on udp", v(`protocol = "udp"` + "\n" + `proxy_protocol = "v2"`), "vip[0].proxy_protocol", "pg", "applies only to tcp VIPs"},
		{"affinity_timeout on udp", v(`protocol = "udp"` + "\n" + `affinity_timeout = "1m"`), "vip[0].affinity_timeout", "pg", "applies only to tcp VIPs"},
		{"connect_timeout on udp", v(`protocol = "udp"` + "\n" + `connect_timeout = "1s"`), "vip[0].connect_timeout", "pg", "applies only to tcp VIPs"},
		{"defer_accept on udp", v(`protocol = "udp"` + "\n" + `defer_accept = true`), "vip[0].defer_accept", "pg", "applies only to tcp VIPs"},
		{"defer_accept false on udp", v(`protocol = "udp"` + "\n" + `defer_accept = false`), "vip[0].defer_accept", "pg", "applies only to tcp VIPs"},
		{"session_timeout range", v(`protocol = "udp"` + "\n" + `session_timeout = "2h"`), "vip[0].session_timeout", "pg", "out of range 1s..1h"},
		{"max_sessions range", v(`protocol = "udp"` + "\n" + `max_sessions = 0`), "vip[0].max_sessions", "pg", "out of range 1..16777216"},
		{"udp_responses range", v(`protocol = "udp"` + "\n" + `udp_responses = -1`), "vip[0].udp_responses", "pg", "out of range 0..65535"},
		{"forward on proxy", v(`forward = "l2"`), "vip[0].forward", "pg", "applies only to mode xdp"},
		{"least_time key elsewhere", v(`least_time_alpha = 0.5`), "vip[0].least_time_alpha", "pg", "applies only to algorithm least_time"},
		{"hash_key elsewhere", v(`hash_key = "src_ip"`), "vip[0].hash_key", "pg", "applies only to algorithm source_hash or maglev"},
		{"maglev size elsewhere", v(`maglev_table_size = 1009`), "vip[0].maglev_table_size", "pg", "applies only to algorithm maglev"},
	} {
		t.Run(c.name, c.run)
	}
}

// manyBackends returns n more backends for the last VIP.
func manyBackends(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  [[vip.backend]]\n  address = \"198.18.2.%d:5432\"\n", i+1)
	}
	return b.String()
}

func TestXDPProblems(t *testing.T) {
	const xdp = "[xdp]\ninterface = \"eth0\"\n"
	xv := func(kv string) string {
		return xdp + "[[vip]]\nname = \"dns\"\nlisten = \"198.18.0.20:53\"\nprotocol = \"udp\"\nmode = \"xdp\"\n" +
			kv + "\n  [[vip.backend]]\n  address = \"198.18.1.41:53\"\n"
	}
	for _, c := range []problemCase{
		{"no xdp table", strings.TrimPrefix(xv(""), xdp), "vip[0].mode", "dns", "needs an [xdp] table"},
		{"algorithm", xv(`algorithm = "round_robin" ` + marker), "vip[0].algorithm", "dns", "balances with maglev, source_hash, least_conn or least_time"},
		{"backend family", xdp + "[[vip]]\nname = \"dns\"\nlisten = \"198.18.0.20:53\"\nmode = \"xdp\"\n[[vip.backend]]\naddress = \"[2001:db8::1]:53\" " + marker + "\n",
			"vip[0].backend[0].address", "dns", "not of the VIP's address family"},
		{"max_sessions", xv(`max_sessions = 10 ` + marker), "vip[0].max_sessions", "dns", "udp VIPs in proxy mode"},
		{"conntrack_size", "[xdp]\ninterface = \"eth0\"\nconntrack_size = 10 " + marker + "\n" + oneVIP(""), "xdp.conntrack_size", "", "out of range 1024..67108864"},
		{"forward", xv(`forward = "gre" ` + marker), "vip[0].forward", "dns", "not one of ipip, l2"},
		{"proxy_protocol", xv(`proxy_protocol = "v1" ` + marker), "vip[0].proxy_protocol", "dns", "tcp VIPs in proxy mode"},
		{"accept_proxy_protocol", xv(`accept_proxy_protocol = "v2" ` + marker), "vip[0].accept_proxy_protocol", "dns", "tcp VIPs in proxy mode"},
		{"udp_responses", xv(`udp_responses = 1 ` + marker), "vip[0].udp_responses", "dns", "replies bypass"},
		{"max_conns", xv(`max_conns = 10 ` + marker), "vip[0].max_conns", "dns", "applies only to tcp VIPs in proxy mode"},
		{"conn_rate_per_client", xv(`conn_rate_per_client = 10 ` + marker), "vip[0].conn_rate_per_client", "dns", "syn_rate_per_source"},
		{"new_flow_rate", xv(`new_flow_rate = -1 ` + marker), "vip[0].new_flow_rate", "dns", "out of range 0..100000000"},
		{"syn_rate_per_source", "[xdp]\ninterface = \"eth0\"\nsyn_rate_per_source = -1 " + marker + "\n" + oneVIP(""), "xdp.syn_rate_per_source", "", "out of range 0..10000000"},
		{"nat_source4 v6", xdp + "nat_source4 = \"2001:db8::1\" " + marker + "\n" + oneVIP(""), "xdp.nat_source4", "", "must be an IPv4 address"},
		{"nat_source6 v4", xdp + "nat_source6 = \"198.18.0.1\" " + marker + "\n" + oneVIP(""), "xdp.nat_source6", "", "must be an IPv6 address"},
		{"nat_source4 unspecified", xdp + "nat_source4 = \"0.0.0.0\" " + marker + "\n" + oneVIP(""), "xdp.nat_source4", "", "must be an IPv4 address"},
		{"nat ports empty", xdp + "nat_port_min = 3000\nnat_port_max = 2000 " + marker + "\n" + oneVIP(""), "xdp.nat_port_max", "", "range would be empty"},
		{"nat port out of range", xdp + "nat_port_max = 70000 " + marker + "\n" + oneVIP(""), "xdp.nat_port_max", "", "out of range 1..65535"},
		{"nat port zero", xdp + "nat_port_min = 0 " + marker + "\n" + oneVIP(""), "xdp.nat_port_min", "", "out of range 1..65535"},
		{"nat VIP on the nat source", "[xdp]\ninterface = \"eth0\"\nnat_source4 = \"198.18.0.20\"\n[[vip]]\nname = \"dns\"\nlisten = \"198.18.0.20:53\" " + marker +
			"\nprotocol = \"udp\"\nmode = \"xdp\"\nforward = \"nat\"\n  [[vip.backend]]\n  address = \"198.18.1.41:53\"\n", "vip[0].listen", "dns", "NAT source address"},
		{"nat VIP mixed family", xv(`forward = "nat"`) + "  [[vip.backend]]\n  address = \"[2001:db8::41]:53\" " + marker + "\n", "vip[0].backend[1].address", "dns", "not of the VIP's address family"},
		{"defer_accept", xv(`defer_accept = true ` + marker), "vip[0].defer_accept", "dns", "applies only to tcp VIPs in proxy mode"},
		{"first_byte_timeout", xv(`first_byte_timeout = "1s" ` + marker), "vip[0].first_byte_timeout", "dns", "applies only to tcp VIPs in proxy mode"},
		{"queue_timeout", xv(`queue_timeout = "1s" ` + marker), "vip[0].queue_timeout", "dns", "applies only to tcp VIPs in proxy mode"},
		{"backend max_sessions", xv("") + "  max_sessions = 5 " + marker + "\n", "vip[0].backend[0].max_sessions", "dns", "per-backend caps do not apply in mode xdp"},
		{"backend max_conns", xdp + "[[vip]]\nname = \"pg\"\nlisten = \"198.18.0.10:5432\"\nmode = \"xdp\"\n[[vip.backend]]\naddress = \"198.18.1.41:5432\"\nmax_conns = 5 " + marker + "\n",
			"vip[0].backend[0].max_conns", "pg", "per-backend caps do not apply in mode xdp"},
		{"hash_balance_factor", xv(`hash_balance_factor = 150 ` + marker), "vip[0].hash_balance_factor", "dns", "in proxy mode"},
		{"named backend port", xdp + "[[vip]]\nname = \"dns\"\nlisten = \"198.18.0.20:53\"\nmode = \"xdp\"\n[[vip.backend]]\naddress = \"ns.db.internal:5353\" " + marker + "\n",
			"vip[0].backend[0].address", "dns", "must equal the listen port 53"},
		{"srv backend", xdp + "[[vip]]\nname = \"dns\"\nlisten = \"198.18.0.20:53\"\nmode = \"xdp\"\n[[vip.backend]]\nsrv = \"_dns._udp.db.internal\" " + marker + "\n",
			"vip[0].backend[0].srv", "dns", "srv needs mode proxy"},
		{"backend port", xdp + "[[vip]]\nname = \"dns\"\nlisten = \"198.18.0.20:53\"\nmode = \"xdp\"\n[[vip.backend]]\naddress = \"198.18.1.41:5353\" " + marker + "\n",
			"vip[0].backend[0].address", "dns", "must equal the listen port 53"},
		{"unspecified listen", xdp + "[[vip]]\nname = \"dns\"\nlisten = \"0.0.0.0:53\" " + marker + "\nmode = \"xdp\"\n[[vip.backend]]\naddress = \"198.18.1.41:53\"\n",
			"vip[0].listen", "dns", "concrete address"},
		{"interface missing", "[xdp] " + marker + "\nattach = \"driver\"\n" + oneVIP(""), "xdp.interface", "", "is required"},
		{"interface name", "[xdp]\ninterface = \"eth0/1\" " + marker + "\n" + oneVIP(""), "xdp.interface", "", "not an interface name"},
		{"interface long", "[xdp]\ninterface = \"abcdefghijklmnop\" " + marker + "\n" + oneVIP(""), "xdp.interface", "", "not an interface name"},
		{"interface list empty", "[xdp]\ninterface = [] " + marker + "\n" + oneVIP(""), "xdp.interface", "", "at least one interface"},
		{"interface twice", "[xdp]\ninterface = [\"eth0\", \"eth1\", \"eth0\"] " + marker + "\n" + oneVIP(""), "xdp.interface", "", `lists "eth0" twice`},
		{"interface in list", "[xdp]\ninterface = [\"eth0\", \"a/b\"] " + marker + "\n" + oneVIP(""), "xdp.interface", "", "not an interface name"},
		{"interface number", "[xdp]\ninterface = [\"eth0\", 1] " + marker + "\n" + oneVIP(""), "xdp.interface", "", "[1] must be an interface name"},
		{"interface type", "[xdp]\ninterface = 1 " + marker + "\n" + oneVIP(""), "xdp.interface", "", "an interface name or an array of them"},
		{"attach", "[xdp]\ninterface = \"eth0\"\nattach = \"offload\" " + marker + "\n" + oneVIP(""), "xdp.attach", "", "not one of driver, generic"},
		{"pin_path", "[xdp]\ninterface = \"eth0\"\npin_path = \"bpf\" " + marker + "\n" + oneVIP(""), "xdp.pin_path", "", "absolute path"},
		{"source_prefix4 family", "[xdp]\ninterface = \"eth0\"\nsource_prefix4 = \"2001:db8::/64\" " + marker + "\n" + oneVIP(""), "xdp.source_prefix4", "", "must be an IPv4 network"},
		{"source_prefix4 host bits", "[xdp]\ninterface = \"eth0\"\nsource_prefix4 = \"198.18.200.1/24\" " + marker + "\n" + oneVIP(""), "xdp.source_prefix4", "", `did you mean "198.18.200.0/24"`},
		{"source_prefix6 short", "[xdp]\ninterface = \"eth0\"\nsource_prefix6 = \"2001:db8::/48\" " + marker + "\n" + oneVIP(""), "xdp.source_prefix6", "", "/64 or longer"},
		{"gue_port", "[xdp]\ninterface = \"eth0\"\ngue_port = 0 " + marker + "\n" + oneVIP(""), "xdp.gue_port", "", "out of range 1..65535"},
	} {
		if c.name == "no xdp table" {
			c.src = strings.Replace(c.src, `mode = "xdp"`, `mode = "xdp" `+marker, 1)
		}
		t.Run(c.name, c.run)
	}
}

func TestBackendProblems(t *testing.T) {
	b := func(kv string) string {
		return "[[vip]]\nname = \"pg\"\nlisten = \"198.18.0.10:5432\"\n  [[vip.backend]]\n  address = \"198.18.1.11:5432\"\n  [[vip.backend]]\n" + kv + " " + marker + "\n"
	}
	for _, c := range []problemCase{
		{"none", "[[vip]] " + marker + "\nname = \"pg\"\nlisten = \"198.18.0.10:5432\"\n", "vip[0].backend", "pg", "at least one"},
		{"address missing", "[[vip]]\nname = \"pg\"\nlisten = \"198.18.0.10:5432\"\n  [[vip.backend]] " + marker + "\n  weight = 5\n",
			"vip[0].backend[0].address", "pg", "is required"},
		{"address syntax", b(`address = "198.18.1.12"`), "vip[0].backend[1].address", "pg", "is not ip:port"},
		{"address port 0", b(`address = "198.18.1.12:0"`), "vip[0].backend[1].address", "pg", "port must not be 0"},
		{"address unspecified", b(`address = "[::]:5432"`), "vip[0].backend[1].address", "pg", "not a backend address"},
		{"address type", b(`address = 5432`), "vip[0].backend[1].address", "pg", "must be a string, not an integer"},
		{"weight", "[[vip]]\nname = \"pg\"\nlisten = \"198.18.0.10:5432\"\n  [[vip.backend]]\n  address = \"198.18.1.11:5432\"\n  weight = 1001 " + marker + "\n",
			"vip[0].backend[0].weight", "pg", "1001 is out of range 0..1000"},
		{"duplicate address", b(`address = "198.18.1.11:5432"`), "vip[0].backend[1].address", "pg", `backend "198.18.1.11:5432" is defined twice (first as vip[0].backend[0])`},
		{"duplicate address v4-mapped", b(`address = "[::ffff:198.18.1.11]:5432"`), "vip[0].backend[1].address", "pg", "is defined twice"},
		{"duplicate address named", b("name = \"b\"\naddress = \"198.18.1.11:5432\""), "vip[0].backend[1].address", "pg", "198.18.1.11:5432 is already the address of vip[0].backend[0]"},
		{"address name", b(`address = "pg_a.db:5432"`), "vip[0].backend[1].address", "pg", "or name:port"},
		{"address name no port", b(`address = "pg-a.db.internal"`), "vip[0].backend[1].address", "pg", "is not ip:port"},
		{"address numeric name", b(`address = "198.18.1:5432"`), "vip[0].backend[1].address", "pg", "is not ip:port"},
		{"address and srv", b("address = \"pg-a.db:5432\"\nsrv = \"_pg._tcp.db\""), "vip[0].backend[1].srv", "pg", "address or srv, not both"},
		{"srv syntax", b(`srv = "pg.db.internal"`), "vip[0].backend[1].srv", "pg", "is not an SRV name"},
		{"duplicate name:port", b(`address = "PG-A.db.:5432"` + "\n  [[vip.backend]]\n  address = \"pg-a.db:5432\""), "vip[0].backend[2].address", "pg", `backend "pg-a.db:5432" is defined twice`},
		{"name", b(`name = "a b"`), "vip[0].backend[1].name", "pg", "must be 1 to 64"},
		// D5: a name that is another backend's IP made drain and disable
		// act on the wrong machine.
		{"name is an IP", b("address = \"198.18.1.12:5432\"\nname = \"198.18.1.11\""), "vip[0].backend[1].name", "pg", `"198.18.1.11" looks like an IP address`},
		{"name reads as an IP", b("address = \"198.18.1.12:5432\"\nname = \"198.018.1.11\""), "vip[0].backend[1].name", "pg", "looks like an IP address"},
		{"name dot dot", b("address = \"198.18.1.12:5432\"\nname = \"..\""), "vip[0].backend[1].name", "pg", `not "." or ".."`},
		{"duplicate name", "[[vip]]\nname = \"pg\"\nlisten = \"198.18.0.10:5432\"\n  [[vip.backend]]\n  name = \"a\"\n  address = \"198.18.1.11:5432\"\n  [[vip.backend]]\n  name = \"a\" " + marker + "\n  address = \"198.18.1.12:5432\"\n",
			"vip[0].backend[1].name", "pg", `backend "a" is defined twice`},
		{"max_conns range", b("address = \"198.18.1.12:5432\"\nmax_conns = -1"), "vip[0].backend[1].max_conns", "pg", "out of range 0..10000000"},
		{"max_conns type", b("address = \"198.18.1.12:5432\"\nmax_conns = \"5\""), "vip[0].backend[1].max_conns", "pg", "must be an integer"},
		{"max_sessions on tcp", b("address = \"198.18.1.12:5432\"\nmax_sessions = 5"), "vip[0].backend[1].max_sessions", "pg", "applies only to udp VIPs (tcp VIPs: max_conns)"},
		{"max_conns on udp", "[[vip]]\nname = \"dns\"\nlisten = \"198.18.0.20:53\"\nprotocol = \"udp\"\n  [[vip.backend]]\n  address = \"198.18.1.11:53\"\n  max_conns = 5 " + marker + "\n",
			"vip[0].backend[0].max_conns", "dns", "applies only to tcp VIPs (udp VIPs: max_sessions)"},
		{"inline table", "[[vip]]\nname = \"pg\"\nlisten = \"198.18.0.10:5432\"\nbackend = [\n  { address = \"198.18.1.11:5432\" },\n  { address = \"198.18.1.11:5432\", weight = -1 }, " + marker + "\n]\n",
			"vip[0].backend[1].weight", "pg", "out of range 0..1000"},
	} {
		t.Run(c.name, c.run)
	}
}

func TestHealthProblems(t *testing.T) {
	h := func(kv string) string { return oneVIP("  [vip.health]\n" + kv + " " + marker) }
	for _, c := range []problemCase{
		{"type", h(`type = "icmp"`), "vip[0].health.type", "pg", "not one of tcp, none, send_expect"},
		{"interval", h(`interval = "50ms"`), "vip[0].health.interval", "pg", "out of range 100ms..1h"},
		{"timeout > interval", h("interval = \"5s\"\ntimeout = \"6s\""), "vip[0].health.timeout", "pg", "timeout 6s must not exceed interval 5s"},
		{"built-in timeout > interval", h(`interval = "500ms"`), "vip[0].health.interval", "pg", "timeout 1s must not exceed interval 500ms"},
		{"rise", h(`rise = 0`), "vip[0].health.rise", "pg", "0 is out of range 1..100"},
		{"fall", h(`fall = 101`), "vip[0].health.fall", "pg", "101 is out of range 1..100"},
		{"port", h(`port = 70000`), "vip[0].health.port", "pg", "out of range 0..65535"},
		{"max_fails", h(`max_fails = 101`), "vip[0].health.max_fails", "pg", "out of range 0..100"},
		{"fail_timeout", h(`fail_timeout = "0s"`), "vip[0].health.fail_timeout", "pg", "out of range 1s..1h"},
		{"slow_start", h(`slow_start = "2h"`), "vip[0].health.slow_start", "pg", "out of range 0s..1h"},
		{"on_down", h(`on_down = "drop"`), "vip[0].health.on_down", "pg", "not one of keep, reset"},
		{"send and send_hex", h("type = \"send_expect\"\nsend = \"PING\"\nsend_hex = \"50\""), "vip[0].health.send_hex", "pg", "mutually exclusive"},
		{"send_hex syntax", h("type = \"send_expect\"\nsend_hex = \"5g\""), "vip[0].health.send_hex", "pg", "not hex bytes"},
		{"send too long", h("type = \"send_expect\"\nsend = \"" + strings.Repeat("x", 4097) + "\""), "vip[0].health.send", "pg", "4097 bytes is more than 4096"},
		{"expect and regex", h("type = \"send_expect\"\nexpect = \"+OK\"\nexpect_regex = \"OK\""), "vip[0].health.expect_regex", "pg", "mutually exclusive"},
		{"expect and expect_hex", h("type = \"send_expect\"\nexpect = \"+OK\"\nexpect_hex = \"2b\""), "vip[0].health.expect_hex", "pg", "mutually exclusive"},
		{"expect_regex syntax", h("type = \"send_expect\"\nexpect_regex = \"(\""), "vip[0].health.expect_regex", "pg", "missing closing )"},
		{"send_expect empty", h(`type = "send_expect"`), "vip[0].health.type", "pg", "nothing to send and nothing to expect is only a TCP connect"},
		// D20: empty values are no check either.
		{"send_expect empty values", h("type = \"send_expect\"\nexpect = \"\"\nsend = \"\""), "vip[0].health.send", "pg", `or use type = "tcp"`},
		{"send_expect empty regex", h("type = \"send_expect\"\nexpect_regex = \"\""), "vip[0].health.expect_regex", "pg", "nothing to send and nothing to expect"},
		{"status", h("type = \"http\"\nstatus = 600"), "vip[0].health.status", "pg", "600 is out of range 100..599"},
		{"path", h("type = \"http\"\npath = \"health\""), "vip[0].health.path", "pg", "must start with /"},
		{"host", h("type = \"http\"\nhost = \"a b\""), "vip[0].health.host", "pg", "no spaces"},
		{"websocket type", h("type = \"http\"\nwebsocket = \"yes\""), "vip[0].health.websocket", "pg", "must be true or false"},
		{"role", h("type = \"postgres\"\nuser = \"u\"\nrole = \"leader\""), "vip[0].health.role", "pg", "not one of any, primary, replica"},
		{"role without user", h("type = \"mysql\"\nrole = \"replica\""), "vip[0].health.role", "pg", "needs a user"},
		{"max_lag on a primary check", h("type = \"postgres\"\nuser = \"u\"\nrole = \"primary\"\nmax_lag = \"5s\""), "vip[0].health.max_lag", "pg", `applies only to postgres and mysql checks with role = "replica"`},
		{"max_lag on tcp", h(`max_lag = "5s"`), "vip[0].health.max_lag", "pg", `applies only to postgres and mysql checks with role = "replica"`},
		{"max_lag range", h("type = \"mysql\"\nuser = \"u\"\nrole = \"replica\"\nmax_lag = \"10ms\""), "vip[0].health.max_lag", "pg", "out of range 0 or 100ms..24h"},
		{"lag_weight on redis", h("type = \"redis\"\nlag_weight = \"1s\""), "vip[0].health.lag_weight", "pg", `applies only to postgres and mysql checks with role = "replica"`},
		{"lag_weight without max_lag", h("type = \"postgres\"\nuser = \"u\"\nrole = \"replica\"\nlag_weight = \"1s\""), "vip[0].health.lag_weight", "pg", "needs max_lag"},
		{"lag_weight above max_lag", h("type = \"postgres\"\nuser = \"u\"\nrole = \"replica\"\nmax_lag = \"2s\"\nlag_weight = \"2s\""), "vip[0].health.lag_weight", "pg", "2s must be below max_lag 2s"},
		{"user NUL", h("type = \"postgres\"\nuser = \"a\\u0000b\""), "vip[0].health.user", "pg", "NUL"},
		{"role on redis", h("type = \"redis\"\nrole = \"primary\""), "vip[0].health.role", "pg", "applies only to health type postgres or mysql, not redis"},
		{"path on tcp", h(`path = "/"`), "vip[0].health.path", "pg", "applies only to health type http, not tcp"},
		{"send on http", h("type = \"http\"\nsend = \"x\""), "vip[0].health.send", "pg", "applies only to health type send_expect"},
		{"websocket on postgres", h("type = \"postgres\"\nwebsocket = true"), "vip[0].health.websocket", "pg", "applies only to health type http"},
	} {
		t.Run(c.name, c.run)
	}
}

func TestFileProblems(t *testing.T) {
	two := func(name, listen, proto string) string {
		return oneVIP("") + "[[vip]]\nname = \"" + name + "\" " + marker + "\nlisten = \"" + listen + "\" " + marker + "\nprotocol = \"" + proto + "\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n"
	}
	dupName := strings.Replace(two("pg", "198.18.0.11:5432", "tcp"), "\nlisten = \"198.18.0.11:5432\" "+marker, "\nlisten = \"198.18.0.11:5432\"", 1)
	dupListen := strings.Replace(two("pg2", "198.18.0.10:5432", "tcp"), "\" "+marker+"\nlisten", "\"\nlisten", 1)
	for _, c := range []problemCase{
		{"no vip", "[global] " + marker + "\n", "vip", "", "at least one VIP"},
		{"duplicate name", dupName, "vip[1].name", "pg", `"pg" is already the name of vip[0] (line 1)`},
		{"duplicate listen", dupListen, "vip[1].listen", "pg2", `tcp/198.18.0.10:5432 is already served by vip "pg" (line 1)`},
		{"defaults value", "[defaults]\nconnect_timeout = \"1h\" " + marker + "\n" + oneVIP(""), "defaults.connect_timeout", "pg", "out of range 1ms..5m"},
		{"defaults.health value", "[defaults.health]\nrise = 0 " + marker + "\n" + oneVIP(""), "defaults.health.rise", "pg", "out of range 1..100"},
		{"defaults timeout vs vip interval", "[defaults.health]\ntimeout = \"3s\"\n" + oneVIP("  [vip.health]\n  interval = \"2s\" "+marker),
			"vip[0].health.interval", "pg", "timeout 3s must not exceed interval 2s"},
		{"defaults interval vs vip timeout", "[defaults.health]\ninterval = \"1s\"\n" + oneVIP("  [vip.health]\n  timeout = \"2s\" "+marker),
			"vip[0].health.timeout", "pg", "must not exceed interval 1s"},
	} {
		if c.name == "no vip" {
			c.src = "[global]\n"
			_, err := config.Parse("test.toml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), "test.toml: vip: no [[vip]] table") {
				t.Errorf("no vip: got %v", err)
			}
			continue
		}
		t.Run(c.name, c.run)
	}
}

// A different protocol on the same address and port is another VIP.
func TestSameListenOtherProtocol(t *testing.T) {
	src := oneVIP("") + "[[vip]]\nname = \"pg-udp\"\nlisten = \"198.18.0.10:5432\"\nprotocol = \"udp\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n"
	if _, err := config.Parse("test.toml", []byte(src)); err != nil {
		t.Fatal(err)
	}
}

// A bad value in [defaults] is reported once, not once per VIP.
func TestDefaultsProblemReportedOnce(t *testing.T) {
	src := "[defaults]\nretries = 99\n" + oneVIP("") +
		"[[vip]]\nname = \"b\"\nlisten = \"198.18.0.11:1\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n"
	_, err := config.Parse("test.toml", []byte(src))
	var cerr *config.Error
	if !errors.As(err, &cerr) || len(cerr.Problems) != 1 {
		t.Fatalf("want exactly one problem, got %v", err)
	}
	if got := cerr.Problems[0].String(); got != `test.toml:2: vip "pg": defaults.retries: 99 is out of range 0..15` {
		t.Errorf("got %q", got)
	}
}

// Named backends load as templates: nothing is resolved, so a file with
// names that no DNS knows loads (l4lb check passes without DNS).
func TestNamedBackends(t *testing.T) {
	c, err := config.Parse("test.toml", []byte(`[global]
resolvers = ["198.18.0.53", "198.18.0.54:5353"]
[[vip]]
name = "pg"
listen = "198.18.0.10:5432"
  [[vip.backend]]
  address = "PG-A.db.internal.:5432"
  [[vip.backend]]
  name = "pool"
  srv = "_postgresql._tcp.nowhere.invalid."
  [[vip.backend]]
  address = "198.18.1.11:5432"
`))
	if err != nil {
		t.Fatal(err)
	}
	g := c.Global
	if fmt.Sprint(g.Resolvers) != "[198.18.0.53:53 198.18.0.54:5353]" || g.ResolveMin.String() != "5s" || g.ResolveMax.String() != "5m0s" {
		t.Errorf("global = %v %v %v", g.Resolvers, g.ResolveMin, g.ResolveMax)
	}
	bs := c.VIPs[0].Backends
	want := []struct {
		id, host, srv string
		port          uint16
		named         bool
	}{
		{"pg-a.db.internal:5432", "pg-a.db.internal", "", 5432, true},
		{"pool", "", "_postgresql._tcp.nowhere.invalid", 0, true},
		{"198.18.1.11:5432", "", "", 0, false},
	}
	for i, w := range want {
		b := bs[i]
		if b.ID() != w.id || b.Host != w.host || b.SRV != w.srv || b.Port != w.port || b.IsNamed() != w.named || b.Address.IsValid() == w.named {
			t.Errorf("backend %d = %+v (id %q), want %+v", i, b, b.ID(), w)
		}
	}
}

// D21: "0" is the one duration without a unit (as in Go's
// time.ParseDuration), the same for every duration key; any other bare
// number is refused with the fix, never read in a guessed unit.
func TestDurationUnits(t *testing.T) {
	for _, s := range []string{`"0"`, `"0s"`, `0`} {
		c, err := config.Parse("t.toml", []byte("[global]\ndrain_timeout = "+s+"\n"+oneVIP("first_byte_timeout = "+s)))
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if c.Global.DrainTimeout != 0 || c.VIPs[0].FirstByteTimeout != 0 {
			t.Errorf("%s: drain_timeout %v, first_byte_timeout %v", s, c.Global.DrainTimeout, c.VIPs[0].FirstByteTimeout)
		}
	}
	for _, key := range []string{"connect_timeout", "first_byte_timeout", "idle_timeout"} {
		_, err := config.Parse("t.toml", []byte(oneVIP(key+` = "2"`)))
		if err == nil || !strings.Contains(err.Error(), `vip[0].`+key+`: "2" has no unit: write "2s"`) {
			t.Errorf("%s = \"2\": %v", key, err)
		}
	}
}
