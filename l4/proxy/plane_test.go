package proxy

import (
	"net/netip"
	"testing"
	"time"
)

// TestPlaneSettings: a plane builds its ACL from the VIP's lists (a
// network in both is refused, with the VIP's name) and derives its
// sockets' keepalive from the service's.
func TestPlaneSettings(t *testing.T) {
	p := func(s string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(s)} }
	st, err := TCPPlaneSettings{Service: Settings{Name: "v"}, Lists: Lists{Deny: p("198.18.0.64/26")}}.service()
	if err != nil || st.Access == nil || st.Access.Allowed(netip.MustParseAddr("198.18.0.66")) || !st.Access.Allowed(netip.MustParseAddr("198.18.0.5")) {
		t.Fatalf("deny list: %v, %v", st.Access, err)
	}
	ust, err := UDPPlaneSettings{Service: UDPSettings{Name: "u"}, Lists: Lists{Allow: p("198.18.0.0/26")}}.service()
	if err != nil || ust.Access == nil || ust.Access.Allowed(netip.MustParseAddr("198.18.0.66")) {
		t.Fatalf("allow list: %v, %v", ust.Access, err)
	}
	if st, err := (TCPPlaneSettings{Service: Settings{Name: "v"}}).service(); err != nil || st.Access != nil {
		t.Fatalf("no lists: %v, %v; want no ACL", st.Access, err)
	}
	if _, err := (TCPPlaneSettings{Service: Settings{Name: "v"}, Lists: Lists{Allow: p("198.18.2.0/24"), Deny: p("198.18.2.0/24")}}).service(); err == nil {
		t.Error("a network in both lists accepted")
	}
	ka := keepAliveFor(Settings{KeepAlive: 40 * time.Second})
	if !ka.Enable || ka.Idle != 40*time.Second || ka.Interval != 10*time.Second || ka.Count != 4 {
		t.Errorf("keepalive 40s: %+v", ka)
	}
	if ka := keepAliveFor(Settings{}); ka.Enable || ka.Count != 0 {
		t.Errorf("keepalive 0: %+v, want off", ka)
	}
}
