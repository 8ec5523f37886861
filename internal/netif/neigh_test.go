// neigh_test.go: managed neighbours for backend next hops, proven in a DSR network without sending the backends any traffic.

package netif_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/netif"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Addresses on the DSR segment that no host has.
var (
	nobody4 = netip.MustParseAddr("198.18.10.200")
	nobody6 = netip.MustParseAddr("2001:db8:10::200")
)

// entry is what the test sees of a neighbour entry in the lb.
type entry struct {
	state   int
	managed bool
	mac     string
}

// neighbors lists the lb's neighbour entries on its veth by address,
// read with a netlink handle of the test's own.
func neighbors(t *testing.T, d *testutil.DSR) map[netip.Addr]entry {
	t.Helper()
	ns, err := netns.GetFromName(d.LB.NS.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(d.LB.Link)
	if err != nil {
		t.Fatal(err)
	}
	list, err := h.NeighList(l.Attrs().Index, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]entry{}
	for _, n := range list {
		a, _ := netip.AddrFromSlice(n.IP)
		out[a.Unmap()] = entry{n.State, n.FlagsExt&netlink.NTF_EXT_MANAGED != 0, n.HardwareAddr.String()}
	}
	return out
}

// managedSet returns the addresses of the lb's managed entries, sorted.
func managedSet(t *testing.T, d *testutil.DSR) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for a, e := range neighbors(t, d) {
		if e.managed {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func sorted(as ...netip.Addr) []netip.Addr {
	slices.SortFunc(as, netip.Addr.Compare)
	return as
}

func waitResolved(t *testing.T, n *netif.Neighbors, addr netip.Addr, want net.HardwareAddr, within time.Duration) {
	t.Helper()
	testutil.Eventually(t, within, addr.String()+" resolved to "+want.String(), func() bool {
		mac, ok := n.Resolved(addr)
		return ok && mac.String() == want.String()
	})
}

// TestNeighborsEnsure: Ensure makes one managed entry per distinct next
// hop (a routed backend shares its gateway's), none for a local address;
// the kernel resolves them with no traffic from the test; a repeat Ensure
// changes nothing; a smaller set removes the rest; Close removes all.
func TestNeighborsEnsure(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 2, IPv6: true})
	h := openIn(t, d.LB.NS)
	be1, be2 := d.Backends[0], d.Backends[1]
	routed := netip.MustParseAddr("198.18.30.5")
	d.Run(t, d.LB.NS, "ip", "route", "add", "198.18.30.0/24", "via", be1.Addr4.String())
	n := h.NewNeighbors()
	backends := []netip.Addr{be1.Addr4, be1.Addr6, be2.Addr4, be2.Addr6, routed, nobody4, d.LB.Addr4}
	if err := n.Ensure(backends); err != nil {
		t.Fatal(err)
	}
	want := sorted(be1.Addr4, be1.Addr6, be2.Addr4, be2.Addr6, nobody4)
	if got := managedSet(t, d); !slices.Equal(got, want) {
		t.Fatalf("managed entries %v, want %v", got, want)
	}
	for _, c := range []struct {
		addr netip.Addr
		mac  net.HardwareAddr
	}{{be1.Addr4, be1.MAC}, {be1.Addr6, be1.MAC}, {be2.Addr4, be2.MAC}, {be2.Addr6, be2.MAC}, {routed, be1.MAC}} {
		waitResolved(t, n, c.addr, c.mac, 5*time.Second)
	}
	if mac, ok := n.Resolved(nobody4); ok {
		t.Errorf("Resolved(%s) = %s: nobody has it", nobody4, mac)
	}
	before := neighbors(t, d)
	if err := n.Ensure(backends); err != nil {
		t.Fatal(err)
	}
	if after := neighbors(t, d); after[be1.Addr4] != before[be1.Addr4] {
		t.Errorf("repeat Ensure changed %s: %+v -> %+v", be1.Addr4, before[be1.Addr4], after[be1.Addr4])
	}
	if err := n.Ensure([]netip.Addr{routed, be2.Addr6}); err != nil {
		t.Fatal(err)
	}
	if got, want := managedSet(t, d), sorted(be1.Addr4, be2.Addr6); !slices.Equal(got, want) {
		t.Errorf("after shrinking: managed entries %v, want %v", got, want)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if got := managedSet(t, d); len(got) != 0 {
		t.Errorf("after Close: managed entries %v remain", got)
	}
}

// TestNeighborsLeaveOthersAlone: a static entry keeps its MAC and a
// managed entry made by someone else stays after Close; a dynamic entry
// is taken over and removed.
func TestNeighborsLeaveOthersAlone(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 2, IPv6: true})
	h := openIn(t, d.LB.NS)
	be1, be2 := d.Backends[0], d.Backends[1]
	const static = "02:00:00:00:00:99"
	d.Run(t, d.LB.NS, "ip", "neigh", "add", be2.Addr4.String(), "dev", d.LB.Link, "lladdr", static, "nud", "permanent")
	d.Run(t, d.LB.NS, "ip", "neigh", "replace", be1.Addr4.String(), "dev", d.LB.Link, "managed")
	d.Run(t, d.LB.NS, "ip", "neigh", "replace", be1.Addr6.String(), "dev", d.LB.Link, "lladdr", be1.MAC.String(), "nud", "stale")
	n := h.NewNeighbors()
	if err := n.Ensure([]netip.Addr{be1.Addr4, be1.Addr6, be2.Addr4}); err != nil {
		t.Fatal(err)
	}
	if mac, ok := n.Resolved(be2.Addr4); !ok || mac.String() != static {
		t.Errorf("static entry: Resolved = %s %v, want %s", mac, ok, static)
	}
	if e := neighbors(t, d)[be1.Addr6]; !e.managed {
		t.Errorf("dynamic entry %s not taken over: %+v", be1.Addr6, e)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	after := neighbors(t, d)
	if e := after[be2.Addr4]; e.state != netlink.NUD_PERMANENT || e.mac != static || e.managed {
		t.Errorf("static entry after Close: %+v", e)
	}
	if e, ok := after[be1.Addr4]; !ok || !e.managed {
		t.Errorf("someone else's managed entry after Close: %+v (present %v)", e, ok)
	}
	if e, ok := after[be1.Addr6]; ok {
		t.Errorf("taken-over entry %s still there after Close: %+v", be1.Addr6, e)
	}
}

// TestNeighborsRefreshAfterFlush: losing the carrier (the switch port
// goes down, as when a cable is pulled) flushes managed entries; Refresh
// puts them back and the kernel resolves them again. (An administrative
// down of the lb's own link would also drop its IPv6 addresses.)
func TestNeighborsRefreshAfterFlush(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 1, IPv6: true})
	h := openIn(t, d.LB.NS)
	be := d.Backends[0]
	n := h.NewNeighbors()
	t.Cleanup(func() { _ = n.Close() })
	if err := n.Ensure(be.Addrs()); err != nil {
		t.Fatal(err)
	}
	waitResolved(t, n, be.Addr4, be.MAC, 5*time.Second)
	d.Run(t, d.Switch, "ip", "link", "set", d.LB.Port, "down")
	if got := managedSet(t, d); len(got) != 0 {
		t.Fatalf("carrier loss left managed entries %v: the test cannot show Refresh", got)
	}
	d.Run(t, d.Switch, "ip", "link", "set", d.LB.Port, "up")
	if err := n.Refresh(); err != nil {
		t.Fatal(err)
	}
	for _, a := range be.Addrs() {
		waitResolved(t, n, a, be.MAC, 5*time.Second)
	}
}

// TestNeighborsKeepResolving: with no traffic and no further call, the
// kernel re-resolves a managed entry when the backend's MAC changes, and
// resolves one whose host was absent at Ensure time once it appears.
// Neighbour timers are shortened in the lb so this takes seconds.
func TestNeighborsKeepResolving(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 2, IPv6: true})
	h := openIn(t, d.LB.NS)
	be1, be2 := d.Backends[0], d.Backends[1]
	var fast []string
	for _, fam := range []string{"ipv4", "ipv6"} {
		p := "net." + fam + ".neigh." + d.LB.Link + "."
		fast = append(fast, p+"base_reachable_time_ms=1000", p+"delay_first_probe_time=1", p+"retrans_time_ms=200")
	}
	writeSysctls(t, d, d.LB.NS, fast...)
	n := h.NewNeighbors()
	t.Cleanup(func() { _ = n.Close() })
	if err := n.Ensure([]netip.Addr{be1.Addr4, be1.Addr6, nobody4, nobody6}); err != nil {
		t.Fatal(err)
	}
	waitResolved(t, n, be1.Addr4, be1.MAC, 5*time.Second)
	waitResolved(t, n, be1.Addr6, be1.MAC, 5*time.Second)

	newMAC, _ := net.ParseMAC("02:4c:34:10:00:ee")
	d.Run(t, be1.NS, "ip", "link", "set", be1.Link, "address", newMAC.String())
	d.Run(t, be2.NS, "ip", "addr", "add", pfx(nobody4, 24), "dev", be2.Link)
	d.Run(t, be2.NS, "ip", "addr", "add", pfx(nobody6, 64), "dev", be2.Link, "nodad")
	waitResolved(t, n, be1.Addr4, newMAC, 20*time.Second)
	waitResolved(t, n, be1.Addr6, newMAC, 20*time.Second)
	waitResolved(t, n, nobody4, be2.MAC, 20*time.Second)
	waitResolved(t, n, nobody6, be2.MAC, 20*time.Second)
}

// TestNeighborsMakeFIBLookupWork is the point of Neighbors: from the lb's
// veth, bpf_fib_lookup answers NO_NEIGH for a backend the lb never talked
// to, and SUCCESS with the backend's MAC once Ensure ran, for an on-link
// and a routed backend.
func TestNeighborsMakeFIBLookupWork(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 1, IPv6: true})
	h := openIn(t, d.LB.NS)
	be := d.Backends[0]
	d.Run(t, d.LB.NS, "ip", "route", "add", "198.18.30.0/24", "via", be.Addr4.String())
	ifc, err := h.Lookup(d.LB.Link)
	if err != nil {
		t.Fatal(err)
	}
	dsts := append(be.Addrs(), netip.MustParseAddr("198.18.30.5"))
	query := func(dst netip.Addr) testutil.FIBResult {
		src := d.Client.Addr4
		if dst.Is6() {
			src = d.Client.Addr6
		}
		return testutil.FIBLookup(t, d.LB.NS, testutil.FIBQuery{IfIndex: ifc.Index, Src: src, Dst: dst})
	}
	for _, dst := range dsts {
		if r := query(dst); r.Ret != testutil.FIBNoNeigh {
			t.Fatalf("%s before Ensure: %+v, want NO_NEIGH", dst, r)
		}
	}
	n := h.NewNeighbors()
	t.Cleanup(func() { _ = n.Close() })
	if err := n.Ensure(dsts); err != nil {
		t.Fatal(err)
	}
	for _, dst := range dsts {
		waitResolved(t, n, dst, be.MAC, 5*time.Second)
		if r := query(dst); r.Ret != testutil.FIBSuccess || r.DMAC.String() != be.MAC.String() || r.SMAC.String() != d.LB.MAC.String() {
			t.Errorf("%s after Ensure: %+v, want SUCCESS %s -> %s", dst, r, d.LB.MAC, be.MAC)
		}
	}
}

// TestMAC: L2 mode's lookup resolves an on-link backend the lb never
// talked to, refuses routed and local addresses, gives up on an absent
// host within its deadline, and keeps a managed entry managed.
func TestMAC(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 1, IPv6: true})
	h := openIn(t, d.LB.NS)
	be := d.Backends[0]
	d.Run(t, d.LB.NS, "ip", "route", "add", "198.18.30.0/24", "via", be.Addr4.String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, a := range be.Addrs() {
		if mac, err := h.MAC(ctx, a); err != nil || mac.String() != be.MAC.String() {
			t.Errorf("MAC(%s) = %s, %v; want %s", a, mac, err, be.MAC)
		}
	}
	if _, err := h.MAC(ctx, netip.MustParseAddr("198.18.30.5")); !errors.Is(err, netif.ErrNotOnLink) {
		t.Errorf("MAC(routed) error %v, want ErrNotOnLink", err)
	}
	if _, err := h.MAC(ctx, d.LB.Addr4); !errors.Is(err, netif.ErrLocal) {
		t.Errorf("MAC(own address) error %v, want ErrLocal", err)
	}
	n := h.NewNeighbors()
	t.Cleanup(func() { _ = n.Close() })
	if err := n.Ensure([]netip.Addr{nobody4}); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	if mac, err := h.MAC(short, nobody4); !errors.Is(err, netif.ErrUnresolved) {
		t.Errorf("MAC(absent host) = %s, %v; want ErrUnresolved", mac, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("MAC(absent host) took %v past a 300 ms deadline", took)
	}
	if e := neighbors(t, d)[nobody4]; !e.managed {
		t.Errorf("MAC cleared the managed flag of %s: %+v", nobody4, e)
	}
}

// TestNeighborsConcurrent: Ensure, Refresh and Resolved from several
// goroutines at once (run with -race).
func TestNeighborsConcurrent(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 2})
	h := openIn(t, d.LB.NS)
	n := h.NewNeighbors()
	t.Cleanup(func() { _ = n.Close() })
	sets := [][]netip.Addr{{d.Backends[0].Addr4}, {d.Backends[1].Addr4}, {d.Backends[0].Addr4, d.Backends[1].Addr4}}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for i := range 20 {
				switch (g + i) % 3 {
				case 0:
					_ = n.Ensure(sets[i%len(sets)])
				case 1:
					_ = n.Refresh()
				default:
					n.Resolved(d.Backends[i%2].Addr4)
				}
			}
		})
	}
	wg.Wait()
	if err := n.Ensure(sets[2]); err != nil {
		t.Fatal(err)
	}
	if got, want := managedSet(t, d), sorted(d.Backends[0].Addr4, d.Backends[1].Addr4); !slices.Equal(got, want) {
		t.Errorf("managed entries %v, want %v", got, want)
	}
}

// markedSet returns the addresses of the lb's entries that carry
// l4lb's mark (netif.NeighProtocol), as `ip neigh` shows them, sorted.
func markedSet(t *testing.T, d *testutil.DSR) []netip.Addr {
	t.Helper()
	out := d.Run(t, d.LB.NS, "ip", "neigh", "show", "proto", strconv.Itoa(netif.NeighProtocol))
	var as []netip.Addr
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 {
			as = append(as, netip.MustParseAddr(f[0]))
		}
	}
	slices.SortFunc(as, netip.Addr.Compare)
	return as
}

// TestNeighborsSweep: the entries one Neighbors makes carry l4lb's mark;
// a second one (a restarted l4lb, the first one killed without Close)
// takes the marked entries it needs as its own and Sweep removes the
// others, while an operator's static entry and unmarked managed entry for
// addresses no backend needs stay as they were.
func TestNeighborsSweep(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 2, IPv6: true})
	be1, be2 := d.Backends[0], d.Backends[1]
	const static = "02:00:00:00:00:99"
	d.Run(t, d.LB.NS, "ip", "neigh", "add", nobody4.String(), "dev", d.LB.Link, "lladdr", static, "nud", "permanent")
	d.Run(t, d.LB.NS, "ip", "neigh", "replace", nobody6.String(), "dev", d.LB.Link, "managed")
	crashed := openIn(t, d.LB.NS).NewNeighbors()
	if err := crashed.Ensure(append(be1.Addrs(), be2.Addrs()...)); err != nil {
		t.Fatal(err)
	}
	if got, want := markedSet(t, d), sorted(be1.Addr4, be1.Addr6, be2.Addr4, be2.Addr6); !slices.Equal(got, want) {
		t.Fatalf("marked entries %v, want %v", got, want)
	}

	n := openIn(t, d.LB.NS).NewNeighbors()
	if err := n.Ensure(be1.Addrs()); err != nil {
		t.Fatal(err)
	}
	removed, err := n.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 {
		t.Errorf("Sweep removed %v, want be2's two entries", removed)
	}
	if got, want := markedSet(t, d), sorted(be1.Addr4, be1.Addr6); !slices.Equal(got, want) {
		t.Errorf("after Sweep: marked entries %v, want %v", got, want)
	}
	after := neighbors(t, d)
	if e := after[nobody4]; e.state != netlink.NUD_PERMANENT || e.mac != static {
		t.Errorf("operator's static entry after Sweep: %+v", e)
	}
	if e, ok := after[nobody6]; !ok || !e.managed {
		t.Errorf("operator's managed entry after Sweep: %+v (present %v)", e, ok)
	}
	// The adopted entries are the new Neighbors' own: Close removes them.
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if got := markedSet(t, d); len(got) != 0 {
		t.Errorf("after Close: marked entries %v remain", got)
	}
}
