// The warnings of a file on its own: each at its key and line, with the
// numbers that make it one, and none for the settings next to them that
// are fine.

package config_test

import (
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
)

// warningCase is a valid file that warns once, at the key on the line
// holding marker, with a message containing msg; or not at all (msg "").
type warningCase struct {
	name, src, key, msg string
}

func (c warningCase) run(t *testing.T) {
	t.Helper()
	cfg, err := config.Parse("w.toml", []byte(c.src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.msg == "" {
		if len(cfg.Warnings) != 0 {
			t.Fatalf("warned: %v", cfg.Warnings)
		}
		return
	}
	if len(cfg.Warnings) != 1 {
		t.Fatalf("warnings %v, want one with %q", cfg.Warnings, c.msg)
	}
	w := cfg.Warnings[0]
	if w.Key != c.key || w.Line != markerLine(t, c.src) || !strings.Contains(w.Msg, c.msg) {
		t.Errorf("warning %q (key %s, line %d), want key %s, line %d, containing %q", w, w.Key, w.Line, c.key, markerLine(t, c.src), c.msg)
	}
}

// D10: a PROXY header from anywhere, or from a network of allowed
// clients, lets a client claim any address.
func TestWarnProxyProtocolTrust(t *testing.T) {
	v := func(kv string) string { return oneVIP("accept_proxy_protocol = \"v2\"\n" + kv) }
	for _, c := range []warningCase{
		{"v4 everyone", v(`accept_proxy_protocol_from = ["0.0.0.0/0"] ` + marker), "vip[0].accept_proxy_protocol_from",
			"0.0.0.0/0 trusts every source to send a PROXY header: any client can claim any address, past allow/deny"},
		{"v6 everyone", v(`accept_proxy_protocol_from = ["198.18.5.0/24", "::/0"] ` + marker), "vip[0].accept_proxy_protocol_from", "::/0 trusts every source"},
		{"overlaps allow", v("allow = [\"10.0.0.0/8\"]\naccept_proxy_protocol_from = [\"10.1.2.0/24\"] " + marker), "vip[0].accept_proxy_protocol_from",
			"10.1.2.0/24 overlaps 10.0.0.0/8, a client network in allow: a client there may send a PROXY header and claim any address"},
		{"allow inside it", v("allow = [\"10.1.2.3\"]\naccept_proxy_protocol_from = [\"10.0.0.0/8\"] " + marker), "vip[0].accept_proxy_protocol_from", "10.0.0.0/8 overlaps 10.1.2.3/32"},
		{"from defaults", "[defaults]\naccept_proxy_protocol_from = [\"0.0.0.0/0\"] " + marker + "\n" + oneVIP(`accept_proxy_protocol = "v1"`),
			"defaults.accept_proxy_protocol_from", "trusts every source"},
		{"balancers apart from clients", v("allow = [\"10.0.0.0/8\"]\naccept_proxy_protocol_from = [\"198.18.5.0/24\"]"), "", ""},
		{"allow everyone", v("allow = [\"0.0.0.0/0\"]\naccept_proxy_protocol_from = [\"198.18.5.0/24\"]"), "", ""},
	} {
		t.Run(c.name, c.run)
	}
}

// D17: with a server-first protocol the client waits for a greeting, so
// defer_accept delays every connection and first_byte_timeout cuts it.
func TestWarnServerFirst(t *testing.T) {
	for _, c := range []warningCase{
		{"defer_accept mysql", oneVIP("defer_accept = true " + marker + "\n  [vip.health]\n  type = \"mysql\""), "vip[0].defer_accept",
			"with health type mysql (the server's greeting) the server speaks first: clients send nothing until their backend greets them, so every connection waits about a second"},
		{"defer_accept banner", oneVIP("defer_accept = true " + marker + "\n  [vip.health]\n  type = \"send_expect\"\n  expect = \"220 \""), "vip[0].defer_accept",
			"a send_expect check that sends nothing and expects a banner"},
		{"first_byte_timeout mysql", oneVIP("first_byte_timeout = \"10s\" " + marker + "\n  [vip.health]\n  type = \"mysql\""), "vip[0].first_byte_timeout",
			"every connection is closed after 10s; set first_byte_timeout = \"0\""},
		{"defer_accept postgres", oneVIP("defer_accept = true\n  [vip.health]\n  type = \"postgres\""), "", ""},
		{"mysql without defer", oneVIP("  [vip.health]\n  type = \"mysql\""), "", ""},
	} {
		t.Run(c.name, c.run)
	}
}

// D19: access lists that let no client of the VIP's family in.
func TestWarnRefusesEveryone(t *testing.T) {
	for _, c := range []warningCase{
		{"deny all v4", oneVIP(`deny = ["0.0.0.0/0"] ` + marker), "vip[0].deny", "deny covers every IPv4 address and allow lists no exception: every client of this VIP is refused"},
		{"deny both halves", oneVIP(`deny = ["0.0.0.0/1", "128.0.0.0/1"] ` + marker), "vip[0].deny", "deny covers every IPv4 address"},
		{"allow other family", oneVIP(`allow = ["2001:db8::/32"] ` + marker), "vip[0].allow", "allow lists no IPv4 network"},
		{"allow covered by deny", oneVIP("deny = [\"10.0.0.0/9\", \"10.128.0.0/9\"]\nallow = [\"10.0.0.0/8\"] " + marker), "vip[0].allow",
			"every network in allow is covered by more specific networks in deny"},
		{"v6 pair denied host by host", strings.Replace(oneVIP("deny = [\"2001:db8::\", \"2001:db8::1\"]\nallow = [\"2001:db8::/127\"] "+marker), "198.18.0.10:5432", "[2001:db8::10]:5432", 1),
			"vip[0].allow", "every network in allow is covered"},
		{"deny v6 all on v4", oneVIP(`deny = ["::/0"]`), "", ""},
		{"exception in deny all", oneVIP("deny = [\"0.0.0.0/0\"]\nallow = [\"10.1.2.0/24\"]"), "", ""},
		{"hole in deny", oneVIP("allow = [\"10.0.0.0/8\"]\ndeny = [\"10.66.0.0/16\"]"), "", ""},
		{"allow inside a deny inside allow", oneVIP("allow = [\"10.0.0.0/8\", \"10.1.0.0/16\"]\ndeny = [\"10.0.0.0/9\", \"10.128.0.0/9\"]"), "", ""},
		{"deny not quite all", oneVIP(`deny = ["0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3"]`), "", ""},
	} {
		t.Run(c.name, c.run)
	}
}

// D22: values in range whose effect is far from what anyone wants.
func TestWarnExtremeValues(t *testing.T) {
	capped := "  [[vip.backend]]\n  address = \"198.18.1.12:5432\"\n  max_conns = 10\n"
	for _, c := range []warningCase{
		{"100 h to notice a death", oneVIP("  [vip.health]\n  interval = \"1h\" " + marker + "\n  timeout = \"1s\"\n  fall = 100"), "vip[0].health.interval",
			"a dead backend is marked down only after fall 100 x interval 1h = 100h of failed checks"},
		{"80 minutes in the queue and connecting", oneVIP("queue_timeout = \"1h\" "+marker+"\nconnect_timeout = \"5m\"\nretries = 3\n") + capped, "vip[0].queue_timeout",
			"a client can wait 1h20m before it is served or reset: queue_timeout 1h + connect_timeout 5m x 4 tries (retries = 3)"},
		{"connect retries alone", oneVIP("connect_timeout = \"5m\" " + marker + "\nretries = 1"), "vip[0].connect_timeout",
			"a client can wait 10m before it is served or reset: connect_timeout 5m x 2 tries (retries = 1)"},
		{"idle below keepalive", oneVIP("idle_timeout = \"30s\" " + marker + "\nkeepalive = \"1m\""), "vip[0].idle_timeout",
			"idle_timeout 30s closes a quiet connection before its first keepalive probe at 1m"},
		{"bgp peer is a VIP", "[bgp]\nasn = 65001\nrouter_id = \"198.18.0.2\"\n[[bgp.peer]]\naddress = \"198.18.0.10\" " + marker + "\nasn = 65000\n" + oneVIP(""),
			"bgp.peer[0].address", `198.18.0.10 is also the address of vip "pg"`},
		{"queue without caps does not count", oneVIP("queue_timeout = \"1h\""), "", ""},
		{"a minute to notice", oneVIP("  [vip.health]\n  interval = \"20s\"\n  fall = 3"), "", ""},
		{"no checks", strings.Replace(oneVIP("protocol = \"udp\""), "5432", "53", -1), "", ""},
		{"keepalive off", oneVIP("idle_timeout = \"30s\"\nkeepalive = \"0\""), "", ""},
	} {
		t.Run(c.name, c.run)
	}
}
