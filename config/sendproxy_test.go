// health.send_proxy: the PROXY header of checks follows the VIP's, as HAProxy's checks do.

package config_test

import (
	"testing"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

func TestHealthSendProxy(t *testing.T) {
	for _, c := range []struct {
		name, vip, health string
		want              string
	}{
		{"proxy_protocol off", "", "", "off"},
		{"on with the VIP's header", `proxy_protocol = "v2"`, "", "v2"},
		{"v1", `proxy_protocol = "v1"`, `type = "send_expect"` + "\nsend = \"PING\"", "v1"},
		{"a check port takes no header by default", `proxy_protocol = "v2"`, "port = 9000", "off"},
		{"unless asked", `proxy_protocol = "v1"`, "port = 9000\nsend_proxy = true", "v1"},
		{"turned off", `proxy_protocol = "v2"`, "send_proxy = false", "off"},
		{"type none sends nothing", `proxy_protocol = "v2"`, `type = "none"`, "off"},
	} {
		src := oneVIP(c.vip + "\n  [vip.health]\n" + c.health)
		cfg, err := config.Parse("test.toml", []byte(src))
		if err != nil {
			t.Errorf("%s: %v\n%s", c.name, err, src)
			continue
		}
		if got := cfg.VIPs[0].Health.SendProxy; got.String() != c.want {
			t.Errorf("%s: SendProxy = %q, want %q", c.name, got, c.want)
		}
	}
	// From [defaults.health]: only the VIPs that send a header send it in checks.
	cfg, err := config.Parse("test.toml", []byte("[defaults.health]\nsend_proxy = true\n"+oneVIP("")))
	if err != nil || cfg.VIPs[0].Health.SendProxy != l4.ProxyOff {
		t.Errorf("send_proxy from [defaults.health] on a VIP without proxy_protocol: %v", err)
	}
}

func TestHealthSendProxyProblems(t *testing.T) {
	h := func(vip, kv string) string { return oneVIP(vip + "\n  [vip.health]\n" + kv + " " + marker) }
	for _, c := range []problemCase{
		{"without proxy_protocol", h("", "send_proxy = true"), "vip[0].health.send_proxy", "pg", `sends its backends no PROXY header (proxy_protocol = "off")`},
		{"type none", h(`proxy_protocol = "v2"`, "type = \"none\"\nsend_proxy = true"), "vip[0].health.send_proxy", "pg", "applies only to health type tcp or"},
		{"type", h(`proxy_protocol = "v2"`, `send_proxy = "yes"`), "vip[0].health.send_proxy", "pg", "must be true or false"},
	} {
		t.Run(c.name, c.run)
	}
}
