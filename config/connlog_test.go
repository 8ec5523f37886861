// log_connections and log_connections_rate: defaults, [defaults], ranges,
// mode xdp, and the warning when log_level hides the lines.

package config_test

import (
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
)

func TestLogConnectionsKeys(t *testing.T) {
	src := `[defaults]
log_connections = true
log_connections_rate = 50
[[vip]]
name = "inherits"
listen = "198.18.0.1:80"
  [[vip.backend]]
  address = "198.18.1.1:80"
[[vip]]
name = "own"
listen = "198.18.0.1:81"
log_connections = false
log_connections_rate = 0
  [[vip.backend]]
  address = "198.18.1.1:80"
[[vip]]
name = "udp"
protocol = "udp"
listen = "198.18.0.1:53"
  [[vip.backend]]
  address = "198.18.1.1:53"
`
	c, err := config.Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		on   bool
		rate int
	}{"inherits": {true, 50}, "own": {false, 0}, "udp": {true, 50}} {
		v := c.VIP(name)
		if v.LogConnections != want.on || v.LogConnectionsRate != want.rate {
			t.Errorf("%s: log_connections %v, rate %d; want %v, %d", name, v.LogConnections, v.LogConnectionsRate, want.on, want.rate)
		}
	}
	c, err = config.Parse("t.toml", []byte(oneVIP("")))
	if err != nil {
		t.Fatal(err)
	}
	if v := c.VIPs[0]; v.LogConnections || v.LogConnectionsRate != 1000 {
		t.Errorf("defaults: log_connections %v, rate %d; want false, 1000", v.LogConnections, v.LogConnectionsRate)
	}
}

func TestLogConnectionsProblems(t *testing.T) {
	xdp := func(kv string) string {
		return "[xdp]\ninterface = \"veth0\"\n[[vip]]\nname = \"a\"\nmode = \"xdp\"\n" + kv + " " + marker +
			"\nlisten = \"198.18.0.1:53\"\n  [[vip.backend]]\n  address = \"198.18.1.1:53\"\n"
	}
	for _, c := range []problemCase{
		{"log_connections on an xdp VIP", xdp("log_connections = true"), "vip[0].log_connections", "a", "not supported in mode xdp"},
		{"log_connections_rate on an xdp VIP", xdp("log_connections_rate = 10"), "vip[0].log_connections_rate", "a", "not supported in mode xdp"},
		{"rate out of range", oneVIP("log_connections_rate = 2000000 " + marker), "vip[0].log_connections_rate", "pg", "out of range"},
		{"rate negative", oneVIP("log_connections_rate = -1 " + marker), "vip[0].log_connections_rate", "pg", "out of range"},
		{"not a bool", oneVIP(`log_connections = "yes" ` + marker), "vip[0].log_connections", "pg", ""},
	} {
		t.Run(c.name, c.run)
	}
	// From [defaults] it is ignored on an xdp VIP, as every scoped key.
	src := "[defaults]\nlog_connections = true\n" + strings.Replace(xdp(""), marker, "", 1)
	c, err := config.Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if c.VIPs[0].LogConnections {
		t.Error("an xdp VIP took log_connections from [defaults]")
	}
}

func TestLogConnectionsHiddenByLevelWarns(t *testing.T) {
	for level, warns := range map[string]bool{"debug": false, "info": false, "warn": true, "error": true} {
		src := "[global]\nlog_level = \"" + level + "\"\n" + oneVIP("log_connections = true")
		c, err := config.Parse("t.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, w := range c.Warnings {
			if w.Key == "vip[0].log_connections" && strings.Contains(w.Msg, "hides") && w.Line == 6 {
				got = true
			}
		}
		if got != warns {
			t.Errorf("log_level %s: warned %v, want %v: %v", level, got, warns, c.Warnings)
		}
	}
}
