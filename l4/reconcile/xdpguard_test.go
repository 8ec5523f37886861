package reconcile

import (
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

// TestVIPACLReuse: the same lists keep the same *guard.ACL (so a publish
// costs no trie walk); changed lists build a new one; none is nil.
func TestVIPACLReuse(t *testing.T) {
	p := func(s string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(s)} }
	var a vipACL
	first, err := a.of(&config.VIP{Deny: p("198.18.0.0/24")})
	if err != nil || first == nil {
		t.Fatalf("first: %v, %v", first, err)
	}
	again, _ := a.of(&config.VIP{Deny: p("198.18.0.0/24")})
	if again != first {
		t.Error("unchanged lists built a new ACL")
	}
	changed, _ := a.of(&config.VIP{Deny: p("198.18.1.0/24")})
	if changed == first || changed.Allowed(netip.MustParseAddr("198.18.1.1")) {
		t.Error("changed lists kept the old ACL")
	}
	if none, _ := a.of(&config.VIP{}); none != nil {
		t.Errorf("no lists: %v, want nil", none)
	}
	if _, err := a.of(&config.VIP{Allow: p("198.18.2.0/24"), Deny: p("198.18.2.0/24")}); err == nil {
		t.Error("a network in both lists accepted")
	}
}

// TestWantsXDPGuards: the program is attached for proxy VIPs only when an
// [xdp] table gives its guards work they can do.
func TestWantsXDPGuards(t *testing.T) {
	deny := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}
	concrete := config.VIP{Listen: netip.MustParseAddrPort("198.18.1.1:80"), Protocol: l4.TCP, Deny: deny}
	wildcard := config.VIP{Listen: netip.MustParseAddrPort("0.0.0.0:80"), Protocol: l4.TCP, Deny: deny}
	cases := []struct {
		name string
		cfg  config.Config
		want bool
	}{
		{"no [xdp]", config.Config{VIPs: []config.VIP{concrete}}, false},
		{"[xdp], no guard", config.Config{XDP: &config.XDP{}, VIPs: []config.VIP{{Listen: concrete.Listen}}}, false},
		{"syn rate", config.Config{XDP: &config.XDP{SYNRatePerSource: 100}}, true},
		{"list on a concrete address", config.Config{XDP: &config.XDP{}, VIPs: []config.VIP{concrete}}, true},
		{"list on a wildcard address", config.Config{XDP: &config.XDP{}, VIPs: []config.VIP{wildcard}}, false},
	}
	for _, c := range cases {
		if got := wantsXDPGuards(&c.cfg); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
