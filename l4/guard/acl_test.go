package guard

import (
	"net/netip"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestACL(t *testing.T) {
	cases := []struct {
		name        string
		allow, deny []netip.Prefix
		allowed     []string
		refused     []string
	}{
		{"empty allows all", nil, nil, []string{"198.18.0.1", "2001:db8::1"}, nil},
		{"deny only", nil, prefixes("198.18.66.0/24"), []string{"198.18.65.1", "198.18.67.255", "2001:db8::1"}, []string{"198.18.66.0", "198.18.66.255", "::ffff:198.18.66.7"}},
		{"allow only", prefixes("198.18.0.0/16"), nil, []string{"198.18.0.1", "198.18.255.255", "::ffff:198.18.3.4"}, []string{"198.19.0.1", "10.0.0.1", "2001:db8::1"}},
		{"more specific allow inside deny", prefixes("10.1.2.0/24"), prefixes("10.0.0.0/8"), []string{"10.1.2.3"}, []string{"10.1.3.3", "10.255.0.1", "198.18.0.1"}},
		{"more specific deny inside allow", prefixes("10.0.0.0/8"), prefixes("10.1.2.0/24"), []string{"10.1.3.3", "10.0.0.1"}, []string{"10.1.2.3", "198.18.0.1"}},
		{"host deny inside allow", prefixes("198.18.0.0/15"), prefixes("198.18.0.9/32"), []string{"198.18.0.8", "198.19.0.9"}, []string{"198.18.0.9"}},
		{"ipv6", prefixes("2001:db8::/32"), prefixes("2001:db8:bad::/48"), []string{"2001:db8::1", "2001:db8:1::1"}, []string{"2001:db8:bad::1", "2001:db9::1", "198.18.0.1"}},
		{"v4 rule does not match v6", nil, prefixes("0.0.0.0/0"), []string{"2001:db8::1", "::1"}, []string{"198.18.0.1", "127.0.0.1"}},
		{"mapped network is v4", nil, prefixes("::ffff:198.18.66.0/120"), []string{"198.18.65.1"}, []string{"198.18.66.1"}},
		{"all v6 denied", prefixes("0.0.0.0/0"), nil, []string{"198.18.0.1"}, []string{"::1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := NewACL(c.allow, c.deny)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.allowed {
				if !a.Allowed(netip.MustParseAddr(s)) {
					t.Errorf("%s refused, want allowed", s)
				}
			}
			for _, s := range c.refused {
				if a.Allowed(netip.MustParseAddr(s)) {
					t.Errorf("%s allowed, want refused", s)
				}
			}
		})
	}
}

func TestACLErrors(t *testing.T) {
	if _, err := NewACL(prefixes("10.0.0.0/8"), prefixes("10.0.0.0/8")); err == nil {
		t.Error("a network both allowed and denied was accepted")
	}
	if a, err := NewACL(nil, nil); a != nil || err != nil {
		t.Errorf("empty lists: %v, %v; want nil, nil", a, err)
	}
}

func TestACLMatch(t *testing.T) {
	a, _ := NewACL(prefixes("10.1.2.0/24"), prefixes("10.0.0.0/8"))
	r, ok := a.Match(netip.MustParseAddr("10.1.2.3"))
	if !ok || !r.Allowed || r.Net != netip.MustParsePrefix("10.1.2.0/24") {
		t.Errorf("Match(10.1.2.3) = %+v, %v", r, ok)
	}
	if _, ok := a.Match(netip.MustParseAddr("198.18.0.1")); ok {
		t.Error("Match(198.18.0.1) found a rule")
	}
}

func TestACLAllowedAllocs(t *testing.T) {
	a, _ := NewACL(prefixes("10.1.2.0/24", "2001:db8::/32"), prefixes("10.0.0.0/8", "198.18.0.0/15", "2001:db8:bad::/48"))
	addrs := []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("2001:db8:bad::1"), netip.MustParseAddr("::ffff:198.18.0.1")}
	if n := testing.AllocsPerRun(1000, func() {
		for _, x := range addrs {
			a.Allowed(x)
		}
	}); n != 0 {
		t.Errorf("Allowed allocates %v times per run", n)
	}
}

func BenchmarkACLAllowed(b *testing.B) {
	var allow, deny []netip.Prefix
	for i := range 1000 {
		deny = append(deny, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24))
	}
	allow = prefixes("10.0.0.0/8")
	a, _ := NewACL(allow, deny)
	x := netip.MustParseAddr("10.200.1.1")
	b.ReportAllocs()
	for b.Loop() {
		a.Allowed(x)
	}
}
