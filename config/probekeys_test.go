// The udp, dns, tls and agent keys of a health table: what they parse to, and every problem.

package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

func TestProbeKeyProblems(t *testing.T) {
	h := func(kv string) string { return oneVIP("  [vip.health]\n" + kv + " " + marker) }
	for _, c := range []problemCase{
		{"udp without send", h(`type = "udp"`), "vip[0].health.type", "pg", "a udp check sends a datagram"},
		{"udp empty send", h("type = \"udp\"\nsend = \"\""), "vip[0].health.send", "pg", "set send or send_hex to something"},
		{"udp bad regex", h("type = \"udp\"\nsend = \"x\"\nexpect_regex = \"(\""), "vip[0].health.expect_regex", "pg", "missing closing )"},
		{"dns without name", h(`type = "dns"`), "vip[0].health.type", "pg", "a dns check asks for a name"},
		{"dns bad name", h("type = \"dns\"\ndns_name = \"a..b\""), "vip[0].health.dns_name", "pg", `"a..b": label ""`},
		{"dns wildcard", h("type = \"dns\"\ndns_name = \"*.example.com\""), "vip[0].health.dns_name", "pg", "not a wildcard"},
		{"dns type", h("type = \"dns\"\ndns_name = \"a.b\"\ndns_type = \"AXFR\""), "vip[0].health.dns_type", "pg", `"AXFR" is not one of A, AAAA, NS, SOA`},
		{"dns_name on tcp", h(`dns_name = "a.b"`), "vip[0].health.dns_name", "pg", "applies only to health type dns, not tcp"},
		{"tls name", h("type = \"tls\"\ntls_server_name = \"bad name\""), "vip[0].health.tls_server_name", "pg", "not a server name a ClientHello may carry"},
		{"tls verify without name", h("type = \"tls\"\ntls_verify = true"), "vip[0].health.tls_verify", "pg", "set tls_server_name"},
		{"tls_verify on http", h("type = \"http\"\ntls_verify = true"), "vip[0].health.tls_verify", "pg", "applies only to health type tls, not http"},
		{"agent_port range", h(`agent_port = 65536`), "vip[0].health.agent_port", "pg", "out of range 0..65535"},
		{"agent_interval without port", h(`agent_interval = "1s"`), "vip[0].health.agent_interval", "pg", "applies only with agent_port"},
		{"agent_send without port", h(`agent_send = "x"`), "vip[0].health.agent_send", "pg", "applies only with agent_port"},
		{"agent_interval range", h("agent_port = 5555\nagent_interval = \"10ms\""), "vip[0].health.agent_interval", "pg", "out of range 100ms..1h"},
		{"agent_timeout > interval", h("agent_port = 5555\nagent_interval = \"1s\"\nagent_timeout = \"2s\""), "vip[0].health.agent_timeout", "pg", "agent_timeout 2s must not exceed agent_interval 1s"},
		{"agent_send too long", h("agent_port = 5555\nagent_send = \"" + strings.Repeat("x", 1025) + "\""), "vip[0].health.agent_send", "pg", "1025 bytes is more than 1024"},
		{"dns on udp VIP is fine, tls on udp needs no refusal, postgres is refused", `[[vip]]
name = "dns"
listen = "198.18.0.10:53"
protocol = "udp"
  [vip.health]
  type = "postgres" ` + marker + `
  [[vip.backend]]
  address = "198.18.1.11:53"
`, "vip[0].health.type", "dns", "use none, udp, dns, or tcp, http, send_expect or tls with port"},
	} {
		t.Run(c.name, c.run)
	}
}

func TestProbeKeysParse(t *testing.T) {
	parse := func(t *testing.T, src string) *config.Config {
		t.Helper()
		c, err := config.Parse("t.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := parse(t, `[[vip]]
name = "dns"
listen = "198.18.0.10:53"
protocol = "udp"
  [vip.health]
  type = "dns"
  dns_name = "Example.TEST."
  dns_type = "SOA"
  interval = "3s"
  timeout = "2s"
  agent_port = 5555
  [[vip.backend]]
  address = "198.18.1.11:53"
`)
	h := c.VIPs[0].Health
	if h.Type != l4.CheckDNS || h.DNSName != "example.test" || h.DNSType != l4.DNSTypeSOA {
		t.Errorf("dns: %+v", h)
	}
	if h.AgentPort != 5555 || h.AgentInterval != 3*time.Second || h.AgentTimeout != 2*time.Second || h.AgentSend != nil {
		t.Errorf("agent defaults: port %d interval %v timeout %v send %q", h.AgentPort, h.AgentInterval, h.AgentTimeout, h.AgentSend)
	}

	// A route's tls check sends the route's first exact name.
	c = parse(t, `[[vip]]
name = "web"
listen = "198.18.0.10:443"
  [[vip.route]]
  name = "api"
  names = ["*.example.test", "api.example.test"]
    [vip.route.health]
    type = "tls"
    tls_verify = true
    [[vip.route.backend]]
    address = "198.18.1.12:443"
  [[vip.backend]]
  address = "198.18.1.11:443"
`)
	if got := c.VIPs[0].Routes[0].Health; got.TLSServerName != "api.example.test" || !got.TLSVerify {
		t.Errorf("route tls: %+v", got)
	}
}
