// netif_test.go: interface lookup, routes, source addresses and MTU checks, from the balancer's namespace of a DSR network.

package netif_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/netif"
	"github.com/l4lb/l4lb/internal/testutil"
)

// openIn returns a Handle bound to ns, closed on cleanup.
func openIn(t *testing.T, ns *testutil.Netns) *netif.Handle {
	t.Helper()
	h, err := netif.OpenPath("/run/netns/" + ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// writeSysctls sets "key=value" sysctls inside ns.
func writeSysctls(t *testing.T, d *testutil.DSR, ns *testutil.Netns, kvs ...string) {
	t.Helper()
	d.InNS(t, ns, func() {
		for _, kv := range kvs {
			k, v, _ := strings.Cut(kv, "=")
			if err := os.WriteFile("/proc/sys/"+strings.ReplaceAll(k, ".", "/"), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func pfx(a netip.Addr, bits int) string { return netip.PrefixFrom(a, bits).String() }

// TestLookup: Lookup reports the lb's veth as NewDSR made it, picks the
// primary addresses past secondary, link-local, deprecated and tentative
// ones, and names a missing interface with ErrNoInterface.
func TestLookup(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 1, IPv6: true})
	h := openIn(t, d.LB.NS)
	lb := d.LB
	// Secondary v4, deprecated v6, and a v6 address that fails duplicate
	// address detection (be1 has it): all newer than the primaries.
	writeSysctls(t, d, lb.NS, "net.ipv6.conf.veth0.accept_dad=1")
	d.Run(t, lb.NS, "ip", "addr", "add", "198.18.10.99/24", "dev", lb.Link)
	d.Run(t, lb.NS, "ip", "addr", "add", "2001:db8:10::99/64", "dev", lb.Link, "nodad", "preferred_lft", "0")
	d.Run(t, lb.NS, "ip", "addr", "add", pfx(d.Backends[0].Addr6, 64), "dev", lb.Link)

	ifc, err := h.Lookup(lb.Link)
	if err != nil {
		t.Fatal(err)
	}
	if ifc.Name != lb.Link || ifc.Index <= 0 || ifc.Kind != "veth" || ifc.MTU != lb.MTU || ifc.MAC.String() != lb.MAC.String() || !ifc.Up || !ifc.Running {
		t.Errorf("Lookup(%s) = %+v; want veth, MTU %d, MAC %s, up and running", lb.Link, ifc, lb.MTU, lb.MAC)
	}
	if a, ok := ifc.PrimaryV4(); !ok || a != lb.Addr4 {
		t.Errorf("PrimaryV4 = %s %v, want %s; addresses %+v", a, ok, lb.Addr4, ifc.Addrs)
	}
	if a, ok := ifc.PrimaryV6(); !ok || a != lb.Addr6 {
		t.Errorf("PrimaryV6 = %s %v, want %s; addresses %+v", a, ok, lb.Addr6, ifc.Addrs)
	}
	if same, err := h.LookupIndex(ifc.Index); err != nil || same.Name != ifc.Name {
		t.Errorf("LookupIndex(%d) = %q, %v", ifc.Index, same.Name, err)
	}
	for _, name := range []string{"nosuch0", ""} {
		if _, err := h.Lookup(name); !errors.Is(err, netif.ErrNoInterface) {
			t.Errorf("Lookup(%q) error %v, want ErrNoInterface", name, err)
		}
	}
	if _, err := h.LookupIndex(99999); !errors.Is(err, netif.ErrNoInterface) {
		t.Errorf("LookupIndex(99999) error %v, want ErrNoInterface", err)
	}
}

// TestRouteTo: on-link and routed backends, an explicit route source,
// local, unreachable and unrouted addresses.
func TestRouteTo(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 2, IPv6: true})
	h := openIn(t, d.LB.NS)
	be1 := d.Backends[0]
	d.Run(t, d.LB.NS, "ip", "route", "add", "198.18.30.0/24", "via", be1.Addr4.String())
	d.Run(t, d.LB.NS, "ip", "route", "add", "2001:db8:30::/64", "via", be1.Addr6.String())
	d.Run(t, d.LB.NS, "ip", "addr", "add", "198.18.10.50/24", "dev", d.LB.Link)
	d.Run(t, d.LB.NS, "ip", "route", "add", "198.18.33.0/24", "via", be1.Addr4.String(), "src", "198.18.10.50")
	d.Run(t, d.LB.NS, "ip", "route", "add", "unreachable", "198.18.40.0/24")

	for _, c := range []struct {
		dst, src, gw string
	}{
		{be1.Addr4.String(), d.LB.Addr4.String(), ""},
		{be1.Addr6.String(), d.LB.Addr6.String(), ""},
		{"198.18.30.5", d.LB.Addr4.String(), be1.Addr4.String()},
		{"2001:db8:30::5", d.LB.Addr6.String(), be1.Addr6.String()},
		{"198.18.33.7", "198.18.10.50", be1.Addr4.String()},
	} {
		checkRoute(t, h, d, c.dst, c.src, c.gw)
	}
	r, err := h.RouteTo(d.LB.Addr4)
	if err != nil || !r.Local || r.OnLink() {
		t.Errorf("RouteTo(own address) = %+v, %v; want Local", r, err)
	}
	for _, dst := range []string{"198.18.40.1", "198.19.0.1", "2001:db8:99::1"} {
		if r, err := h.RouteTo(netip.MustParseAddr(dst)); !errors.Is(err, netif.ErrNoRoute) {
			t.Errorf("RouteTo(%s) = %+v, %v; want ErrNoRoute", dst, r, err)
		}
	}
}

func checkRoute(t *testing.T, h *netif.Handle, d *testutil.DSR, dst, src, gw string) {
	t.Helper()
	r, err := h.RouteTo(netip.MustParseAddr(dst))
	if err != nil {
		t.Fatalf("RouteTo(%s): %v", dst, err)
	}
	wantHop := dst
	if gw != "" {
		wantHop = gw
	}
	gotGw := ""
	if r.Gateway.IsValid() {
		gotGw = r.Gateway.String()
	}
	if r.Src.String() != src || gotGw != gw || r.NextHop().String() != wantHop || r.IfName != d.LB.Link || r.MTU != d.LB.MTU || r.OnLink() != (gw == "") {
		t.Errorf("RouteTo(%s) = %+v; want src %s gateway %q via %s MTU %d", dst, r, src, gw, d.LB.Link, d.LB.MTU)
	}
}

// TestCheckEncapMTU: the lb's 1600-byte links carry 1500-byte packets
// plus either outer header; a route with a smaller MTU, or a larger inner
// MTU, does not fit and says so with ErrMTU.
func TestCheckEncapMTU(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 1, IPv6: true})
	h := openIn(t, d.LB.NS)
	be := d.Backends[0]
	d.Run(t, d.LB.NS, "ip", "route", "add", "198.18.31.0/24", "via", be.Addr4.String(), "mtu", "1500")
	for _, c := range []struct {
		dst   string
		inner int
		fits  bool
	}{
		{be.Addr4.String(), 1500, true},
		{be.Addr6.String(), 1500, true},
		{be.Addr4.String(), 1580, true},
		{be.Addr6.String(), 1580, false},
		{"198.18.31.9", 1500, false},
		{"198.18.31.9", 1480, true},
	} {
		err := h.CheckEncapMTU(netip.MustParseAddr(c.dst), c.inner)
		if c.fits && err != nil || !c.fits && !errors.Is(err, netif.ErrMTU) {
			t.Errorf("CheckEncapMTU(%s, %d) = %v; fits %v", c.dst, c.inner, err, c.fits)
		}
	}
	if mtu, err := h.PathMTU(netip.MustParseAddr("198.18.31.9")); err != nil || mtu != 1500 {
		t.Errorf("PathMTU via a route with mtu 1500 = %d, %v", mtu, err)
	}
	if got := netif.EncapOverhead(netip.MustParseAddr("::ffff:198.18.10.11")); got != 20 {
		t.Errorf("EncapOverhead(v4-mapped) = %d, want 20", got)
	}
}
