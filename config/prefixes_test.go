package config_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

// TestAcceptProxyProtocol: the keys parse into a mode and normalised
// networks, [defaults] may set them for tcp and udp VIPs alike, and
// `check --diff` and the formatter see them.
func TestAcceptProxyProtocol(t *testing.T) {
	c := mustParse(t, `
[defaults]
accept_proxy_protocol = "any"
accept_proxy_protocol_from = ["198.18.0.0/15", "2001:db8::7", "::ffff:10.1.0.0/112"]

[[vip]]
name = "web"
listen = "198.18.0.10:80"
  [[vip.backend]]
  address = "198.18.1.11:80"

[[vip]]
name = "dns"
listen = "198.18.0.20:53"
protocol = "udp"
  [[vip.backend]]
  address = "198.18.1.21:53"
`)
	web, dns := c.VIP("web"), c.VIP("dns")
	want := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::7/128"), netip.MustParsePrefix("10.1.0.0/16")}
	if web.AcceptProxyProtocol != l4.AcceptProxyAny || !slices.Equal(web.AcceptProxyProtocolFrom, want) {
		t.Fatalf("web: %q from %v", web.AcceptProxyProtocol, web.AcceptProxyProtocolFrom)
	}
	if dns.AcceptProxyProtocol != l4.AcceptProxyOff || dns.AcceptProxyProtocolFrom != nil {
		t.Fatalf("dns: %q from %v", dns.AcceptProxyProtocol, dns.AcceptProxyProtocolFrom)
	}
	next := *c
	next.VIPs = slices.Clone(c.VIPs)
	for i := range next.VIPs {
		if next.VIPs[i].Name == "web" {
			next.VIPs[i].AcceptProxyProtocolFrom = want[:1]
		}
	}
	d := config.Diff(c, &next, config.DiffOptions{})
	if s := fmt.Sprintf("%+v", d); !strings.Contains(s, `accept_proxy_protocol_from Old:["198.18.0.0/15", "2001:db8::7/128", "10.1.0.0/16"] New:["198.18.0.0/15"]`) {
		t.Fatalf("diff does not show the changed networks:\n%s", s)
	}
}
