// Tests of Load/Parse: the example, strictness, layering, addresses.

package config_test

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

func mustParse(t *testing.T, src string) *config.Config {
	t.Helper()
	c, err := config.Parse("test.toml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestExampleLoads(t *testing.T) {
	c, err := config.Load("../examples/l4lb.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != "../examples/l4lb.toml" || c.XDP != nil {
		t.Errorf("Path = %q, XDP = %v", c.Path, c.XDP)
	}
	want := map[string]string{"postgres": "postgres", "redis": "redis", "websocket": "http", "dns": "tcp", "tls": "tcp", "pg-tenants": "tcp"}
	if len(c.VIPs) != len(want) {
		t.Fatalf("%d VIPs, want %d", len(c.VIPs), len(want))
	}
	for name, check := range want {
		v := c.VIP(name)
		if v == nil || v.Health.Type.String() != check || len(v.Backends) == 0 || v.Line == 0 {
			t.Errorf("VIP(%q) = %+v", name, v)
		}
	}
	if c.VIP("nope") != nil {
		t.Error("VIP(nope) != nil")
	}
	ws := c.VIP("websocket")
	if !ws.Health.WebSocket || ws.Health.Status != 101 || ws.ProxyProtocol != l4.ProxyV2 || !ws.DeferAccept {
		t.Errorf("websocket VIP: %+v", ws)
	}
	if dns := c.VIP("dns"); dns.UDPResponses != 1 || dns.Protocol != l4.UDP || dns.ProxyProtocol != l4.ProxyOff {
		t.Errorf("dns VIP: %+v", dns)
	}
}

// The commented-out [xdp] block of the example is valid too.
func TestExampleXDPBlock(t *testing.T) {
	data, err := os.ReadFile("../examples/l4lb.toml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	i := strings.Index(src, "# [xdp]")
	var b strings.Builder
	for _, line := range strings.SplitAfter(src[i:], "\n") {
		b.WriteString(strings.TrimPrefix(strings.TrimLeft(line, " "), "# "))
	}
	c := mustParse(t, src[:i]+b.String())
	v := c.VIP("dns-xdp")
	if c.XDP == nil || c.XDP.Interface != "eth0" || v == nil || v.Algorithm != l4.Maglev || v.HashKey != l4.HashFiveTuple {
		t.Errorf("XDP = %+v, VIP = %+v", c.XDP, v)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load("testdata/does-not-exist.toml")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestUnknownKeys(t *testing.T) {
	for _, c := range []problemCase{
		{"top level", "colour = 1 " + marker + "\n" + oneVIP(""), "colour", "", "unknown key"},
		{"table", "[globl] " + marker + "\nlog_level = \"info\"\n" + oneVIP(""), "globl", "", "unknown table"},
		{"global", "[global]\nloglevel = \"info\" " + marker + "\n" + oneVIP(""), "global.loglevel", "", "unknown key"},
		{"vip", oneVIP(`lsiten = "x" ` + marker), "vip[0].lsiten", "pg", "unknown key"},
		{"vip.health in second vip", oneVIP("") + "[[vip]]\nname = \"b\"\nlisten = \"198.18.0.11:1\"\n  [vip.health]\n  intervall = \"2s\" " + marker + "\n  [[vip.backend]]\n  address = \"198.18.1.1:1\"\n",
			"vip[1].health.intervall", "b", "unknown key"},
		{"backend", oneVIP("") + "  [[vip.backend]]\n  adress = \"198.18.1.12:5432\" " + marker + "\n", "vip[0].backend[1].adress", "pg", "unknown key"},
		{"backend table name", oneVIP("") + "  [[vip.backends]] " + marker + "\n  address = \"198.18.1.12:5432\"\n", "vip[0].backends", "pg", "unknown table"},
		{"inline table", oneVIP(`health = { type = "tcp", intervall = "1s" } ` + marker), "vip[0].health.intervall", "pg", "unknown key"},
		{"dotted key", oneVIP(`health.intervall = "1s" ` + marker), "vip[0].health.intervall", "pg", "unknown key"},
		{"upper case", oneVIP(`Retries = 3 ` + marker), "vip[0].Retries", "pg", "keys are lower case"},
		{"defaults", "[defaults]\nlisten = \"198.18.0.1:1\" " + marker + "\n" + oneVIP(""), "defaults.listen", "", "cannot be set in [defaults]"},
		{"defaults.health", "[defaults.health]\nexpect_re = \"x\" " + marker + "\n" + oneVIP(""), "defaults.health.expect_re", "", "unknown key"},
		{"xdp", "[xdp]\ninterface = \"eth0\"\nmode = \"native\" " + marker + "\n" + oneVIP(""), "xdp.mode", "", "unknown key"},
	} {
		t.Run(c.name, c.run)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"syntax", oneVIP("retries = = 3"), "test.toml:4: "},
		{"duplicate key", oneVIP("retries = 1\nretries = 2"), "test.toml:5: "},
		{"shape", "# comment\n\nvip = \"x\"\n", "test.toml:3: vip: must be an array of tables"},
		{"table not array", "[vip]\nname = \"x\"\n", "test.toml:1: vip: must be an array of tables"},
		{"scalar not table", "[[vip]]\nhealth = 5\n", "test.toml:2: vip.health: must be a table"},
		// D32: a VIP's table before any [[vip]] says where it goes, not
		// what the decoder's types are.
		{"health before vip", "[vip.health]\ntype = \"tcp\"\n" + oneVIP(""), "test.toml:1: [vip.health] comes before any [[vip]], which makes vip a table instead of the list of VIPs: " +
			"a VIP's own tables ([vip.health], [[vip.backend]], [[vip.route]]) go below its [[vip]] header; move it there, or make it [defaults.health] for every VIP"},
		{"health and no vip", "[global]\n[vip.health] # checks\ntype = \"tcp\"\n", "test.toml:2: [vip.health] comes before any [[vip]]"},
		{"backend before vip", "[[vip.backend]]\naddress = \"198.18.1.1:1\"\n" + oneVIP(""), "test.toml:1: [[vip.backend]] comes before any [[vip]]"},
	} {
		_, err := config.Parse("test.toml", []byte(c.src))
		var cerr *config.Error
		if !errors.As(err, &cerr) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want prefix %q", c.name, err, c.want)
		}
	}
}

func TestSeveralProblemsAtOnce(t *testing.T) {
	src := `[global]
log_level = "loud"
[[vip]]
name = "pg"
listen = "198.18.0.10:5432"
retries = 99
colour = "red"
  [vip.health]
  rise = 0
  [[vip.backend]]
  address = "198.18.1.11"
  [[vip.backend]]
  address = "198.18.1.12:5432"
  weight = 2000
`
	_, err := config.Parse("test.toml", []byte(src))
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		`test.toml:2: global.log_level: "loud" is not one of debug, info, warn, error`,
		`test.toml:6: vip "pg": vip[0].retries: 99 is out of range 0..15`,
		`test.toml:7: vip "pg": vip[0].colour: unknown key`,
		`test.toml:9: vip "pg": vip[0].health.rise: 0 is out of range 1..100`,
		`test.toml:11: vip "pg": vip[0].backend[0].address: "198.18.1.11" is not ip:port`,
		`test.toml:14: vip "pg": vip[0].backend[1].weight: 2000 is out of range 0..1000`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d = %q, want prefix %q", i, lines[i], w)
		}
	}
}

func TestDefaultsLayering(t *testing.T) {
	c := mustParse(t, `
[defaults]
connect_timeout = "5s"
retries = 4
proxy_protocol = "v1"
session_timeout = "10s"
defer_accept = true
first_byte_timeout = "3s"
  [defaults.health]
  interval = "3s"
  rise = 5
  send = "PING"
  path = "/healthz"

[[vip]]
name = "builtin"
listen = "198.18.0.10:1"
mode = "proxy"
  [vip.health]
  type = "http"
  [[vip.backend]]
  address = "198.18.1.1:1"

[[vip]]
name = "own"
listen = "198.18.0.11:1"
connect_timeout = "7s"
proxy_protocol = "off"
defer_accept = false
first_byte_timeout = "0s"
  [vip.health]
  type = "send_expect"
  rise = 1
  send_hex = "50 4f"
  [[vip.backend]]
  address = "198.18.1.1:1"

[[vip]]
name = "udp"
listen = "198.18.0.12:1"
protocol = "udp"
  [[vip.backend]]
  address = "198.18.1.1:1"
`)
	b, o, u := c.VIP("builtin"), c.VIP("own"), c.VIP("udp")
	// built-in < [defaults]
	if b.ConnectTimeout != 5*time.Second || b.Retries != 4 || b.IdleTimeout != time.Hour || b.ProxyProtocol != l4.ProxyV1 || !b.DeferAccept || b.FirstByteTimeout != 3*time.Second {
		t.Errorf("builtin VIP: %+v", b)
	}
	if b.Health.Interval != 3*time.Second || b.Health.Rise != 5 || b.Health.Fall != 3 || b.Health.Path != "/healthz" || b.Health.Status != 200 {
		t.Errorf("builtin VIP health: %+v", b.Health)
	}
	if b.Algorithm != l4.RoundRobin || b.HashKey != l4.HashSrcIP || b.MaglevTableSize != 65537 {
		t.Errorf("builtin VIP balancing: %+v", b)
	}
	// [defaults] < VIP; send_hex replaces the default send
	if o.ConnectTimeout != 7*time.Second || o.Retries != 4 || o.ProxyProtocol != l4.ProxyOff || o.DeferAccept || o.FirstByteTimeout != 0 {
		t.Errorf("own VIP: %+v", o)
	}
	if o.Health.Rise != 1 || string(o.Health.Send) != "PO" || o.Health.Path != "" {
		t.Errorf("own VIP health: %+v", o.Health)
	}
	// [defaults] keys that do not apply are ignored, not errors
	if u.SessionTimeout != 10*time.Second || u.ProxyProtocol != l4.ProxyOff || u.DeferAccept || u.FirstByteTimeout != 0 || u.Health.Send != nil || u.Health.Path != "" {
		t.Errorf("udp VIP: %+v", u)
	}
}

func TestModeDependentDefaults(t *testing.T) {
	c := mustParse(t, `
[global]
admin_socket = "off"
[xdp]
interface = "veth0"
[[vip]]
name = "x"
listen = "198.18.0.10:53"
mode = "xdp"
  [[vip.backend]]
  address = "198.18.1.1:53"
`)
	v := c.VIPs[0]
	if v.Algorithm != l4.Maglev || v.HashKey != l4.HashFiveTuple || v.Forward != l4.ForwardIPIP || v.Protocol != l4.TCP {
		t.Errorf("xdp VIP: %+v", v)
	}
	if c.Global.AdminSocket != "" || c.XDP.Attach != l4.AttachDriver || c.Global.PipeSize != 1<<20 {
		t.Errorf("global %+v, xdp %+v", c.Global, c.XDP)
	}
}

func TestIPv6(t *testing.T) {
	c := mustParse(t, `
[global]
metrics_listen = "[::1]:9370"
[[vip]]
name = "v6"
listen = "[2001:db8::10]:5432"
  [[vip.backend]]
  address = "[2001:db8::11]:5432"
  [[vip.backend]]
  address = "[::ffff:198.18.1.12]:5432"
[[vip]]
name = "v6-udp"
listen = "[2001:db8::10]:5432"
protocol = "udp"
  [[vip.backend]]
  address = "198.18.1.13:5432"
`)
	v := c.VIP("v6")
	if v.Listen != netip.MustParseAddrPort("[2001:db8::10]:5432") {
		t.Errorf("listen = %v", v.Listen)
	}
	if v.Backends[0].Address != netip.MustParseAddrPort("[2001:db8::11]:5432") ||
		v.Backends[1].Address != netip.MustParseAddrPort("198.18.1.12:5432") {
		t.Errorf("backends = %+v", v.Backends)
	}
	if v.Backends[1].Line != 9 || v.Line != 4 {
		t.Errorf("lines: vip %d, backend %d", v.Line, v.Backends[1].Line)
	}
}

func TestHealthTypeDefaultsByProtocol(t *testing.T) {
	cfg, err := config.Parse("t.toml", []byte(`
[[vip]]
name = "t"
listen = "198.18.0.1:80"
  [[vip.backend]]
  address = "198.18.1.1:80"
[[vip]]
name = "u"
listen = "198.18.0.1:53"
protocol = "udp"
  [[vip.backend]]
  address = "198.18.1.1:53"
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.VIP("t").Health.Type; got != l4.CheckTCP {
		t.Errorf("tcp VIP health type %q, want tcp", got)
	}
	if got := cfg.VIP("u").Health.Type; got != l4.CheckNone {
		t.Errorf("udp VIP health type %q, want none", got)
	}
}

// TestBackendCaps: per-backend caps and queue_timeout load, with their
// defaults, and survive a Format round trip.
func TestBackendCaps(t *testing.T) {
	c := mustParse(t, `
[[vip]]
name = "pg"
listen = "198.18.0.10:5432"
  [[vip.backend]]
  address = "198.18.1.11:5432"
  max_conns = 5
  [[vip.backend]]
  address = "198.18.1.12:5432"
[[vip]]
name = "q"
listen = "198.18.0.10:5433"
queue_timeout = "0s"
  [[vip.backend]]
  address = "198.18.1.11:5433"
[[vip]]
name = "dns"
listen = "198.18.0.20:53"
protocol = "udp"
  [[vip.backend]]
  address = "198.18.1.11:53"
  max_sessions = 7
`)
	pg, q, dns := c.VIPs[0], c.VIPs[1], c.VIPs[2]
	if pg.Backends[0].MaxConns != 5 || pg.Backends[1].MaxConns != 0 || pg.QueueTimeout != 5*time.Second {
		t.Errorf("pg: max_conns %d/%d, queue_timeout %v; want 5/0, 5s", pg.Backends[0].MaxConns, pg.Backends[1].MaxConns, pg.QueueTimeout)
	}
	if q.QueueTimeout != 0 {
		t.Errorf("q: queue_timeout %v, want 0", q.QueueTimeout)
	}
	if dns.Backends[0].MaxSessions != 7 || dns.QueueTimeout != 5*time.Second {
		t.Errorf("dns: max_sessions %d, queue_timeout %v (built-in)", dns.Backends[0].MaxSessions, dns.QueueTimeout)
	}
	again := mustParse(t, string(config.Format(c, config.FormatOptions{})))
	if again.VIPs[0].Backends[0].MaxConns != 5 || again.VIPs[2].Backends[0].MaxSessions != 7 || again.VIPs[1].QueueTimeout != 0 {
		t.Errorf("Format round trip lost a cap: %+v", again.VIPs)
	}
}

// D14: a problem without a line has no line part (it was "file:?:").
func TestProblemWithoutLine(t *testing.T) {
	for _, c := range []struct {
		p    config.Problem
		want string
	}{
		{config.Problem{File: "f.toml", Key: "global.workers", Msg: "m"}, "f.toml: global.workers: m"},
		{config.Problem{File: "f.toml", Line: 3, VIP: "a", Key: "vip[0].listen", Msg: "m"}, `f.toml:3: vip "a": vip[0].listen: m`},
		{config.Problem{File: "f.toml", Msg: "m"}, "f.toml: m"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
}

// D14: the settings only a restart applies warn at their lines.
func TestRestartWarningsHaveLines(t *testing.T) {
	running := mustParse(t, oneVIP(""))
	next := mustParse(t, "[global]\nlog_level = \"info\"\npipe_size = 2097152\n"+oneVIP(""))
	ws := config.RestartWarnings(running, next)
	if len(ws) != 1 || ws[0].Key != "global.pipe_size" || ws[0].Line != 3 || !strings.HasPrefix(ws[0].String(), "test.toml:3: global.pipe_size: differs from the running") {
		t.Fatalf("%v", ws)
	}
}

// [xdp] interface takes one name or a list; Interface is the first, and
// Format writes each spelling back as it came.
func TestXDPInterfaces(t *testing.T) {
	const vip = "\n[[vip]]\nname = \"x\"\nlisten = \"198.18.2.20:53\"\nmode = \"xdp\"\n  [[vip.backend]]\n  address = \"198.18.1.21:53\"\n"
	for _, c := range []struct{ value, want string }{{`"eth0"`, "eth0"}, {`["eth1", "eth0"]`, "eth1 eth0"}} {
		cfg := mustParse(t, "[xdp]\ninterface = "+c.value+vip)
		if got := strings.Join(cfg.XDP.Interfaces, " "); got != c.want || cfg.XDP.Interface != cfg.XDP.Interfaces[0] {
			t.Errorf("interface = %s: Interfaces %q, Interface %q", c.value, cfg.XDP.Interfaces, cfg.XDP.Interface)
		}
		if out := string(config.Format(cfg, config.FormatOptions{})); !strings.Contains(out, "interface = "+c.value+"\n") {
			t.Errorf("interface = %s formatted as:\n%s", c.value, out)
		}
	}
}
