// BIRD with BFD: the router's protocol bfd, and its kernel route to a
// prefix read over netlink (fast enough to time sub-second failovers).

package testutil

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// BirdBFD is a protocol bfd block: every interface, this interval (both
// ways) and multiplier; BGP protocols with `bfd on` use it.
func BirdBFD(interval time.Duration, mult int) string {
	return fmt.Sprintf("protocol bfd {\n\tinterface \"*\" { interval %d ms; multiplier %d; };\n}\n", interval.Milliseconds(), mult)
}

// StartRouterBFD is StartRouter with BFD (interval, multiplier) on every
// neighbour's session, BGP's error wait short so that a session BFD closed
// comes back soon, and bird at nice -20.
func (e *ECMP) StartRouterBFD(t testing.TB, lbASN uint32, holdSeconds int, interval time.Duration, mult int) *Bird {
	t.Helper()
	var ns []BirdNeighbor
	for i := range e.LBs {
		ns = append(ns, BirdNeighbor{Name: fmt.Sprintf("lb%d", i), Addr: e.LBAddr(i), ASN: lbASN, BFD: true})
	}
	conf := BirdConfig(e.RouterID, 65000, holdSeconds, ns...) + BirdBFD(interval, mult)
	conf = strings.ReplaceAll(conf, "\tpassive on;\n", "\tpassive on;\n\terror wait time 1, 2;\n")
	// At nice -20, as l4lb's BFD threads run: a router's BFD is its most
	// urgent work (often in hardware), and on the loaded 2-core test
	// machine a bird at nice 0 went 300 ms unscheduled.
	return startBird(t, e.Router, conf, "nice", "-n", "-20")
}

// RouteWatcher reads a namespace's kernel routes over netlink.
type RouteWatcher struct {
	h *netlink.Handle
}

// WatchRoutes opens a netlink handle in ns, closed when the test ends.
func WatchRoutes(t testing.TB, ns *Netns) *RouteWatcher {
	t.Helper()
	nh, err := netns.GetFromName(ns.Name)
	if err != nil {
		t.Fatalf("netns %s: %v", ns.Name, err)
	}
	h, err := netlink.NewHandleAt(nh)
	nh.Close()
	if err != nil {
		t.Fatalf("netlink in %s: %v", ns.Name, err)
	}
	t.Cleanup(h.Close)
	return &RouteWatcher{h: h}
}

// NextHops returns the gateways of the route to prefix, sorted.
func (w *RouteWatcher) NextHops(t testing.TB, prefix netip.Prefix) []netip.Addr {
	t.Helper()
	dst := netipPrefixToIPNet(prefix)
	routes, err := w.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
	if err != nil {
		t.Fatalf("route list %s: %v", prefix, err)
	}
	var hops []netip.Addr
	add := func(ip []byte) {
		if a, ok := netip.AddrFromSlice(ip); ok {
			hops = append(hops, a.Unmap())
		}
	}
	for _, r := range routes {
		if r.Gw != nil {
			add(r.Gw)
		}
		for _, nh := range r.MultiPath {
			if nh.Gw != nil {
				add(nh.Gw)
			}
		}
	}
	slices.SortFunc(hops, netip.Addr.Compare)
	return hops
}

// WaitNextHops polls (every 5ms) until the route to prefix has exactly
// want as next hops and returns how long that took since start.
func (w *RouteWatcher) WaitNextHops(t testing.TB, prefix netip.Prefix, start time.Time, d time.Duration, want ...netip.Addr) time.Duration {
	t.Helper()
	slices.SortFunc(want, netip.Addr.Compare)
	for {
		got := w.NextHops(t, prefix)
		if slices.Equal(got, want) {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("route %s: next hops %v after %v, want %v", prefix, got, d, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func netipPrefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
