package xdpplane

import (
	"net/netip"
	"testing"
)

// TestVIPACLReuse: the same lists keep the same *guard.ACL (so a publish
// costs no trie walk); changed lists build a new one; none is nil.
func TestVIPACLReuse(t *testing.T) {
	p := func(s string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(s)} }
	var a vipACL
	first, err := a.of(nil, p("198.18.0.0/24"))
	if err != nil || first == nil {
		t.Fatalf("first: %v, %v", first, err)
	}
	again, _ := a.of(nil, p("198.18.0.0/24"))
	if again != first {
		t.Error("unchanged lists built a new ACL")
	}
	changed, _ := a.of(nil, p("198.18.1.0/24"))
	if changed == first || changed.Allowed(netip.MustParseAddr("198.18.1.1")) {
		t.Error("changed lists kept the old ACL")
	}
	if none, _ := a.of(nil, nil); none != nil {
		t.Errorf("no lists: %v, want nil", none)
	}
	if _, err := a.of(p("198.18.2.0/24"), p("198.18.2.0/24")); err == nil {
		t.Error("a network in both lists accepted")
	}
}
