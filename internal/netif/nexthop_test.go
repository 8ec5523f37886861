// nexthop_test.go: NextHops and Watch, in the balancer's namespace of a DSR network.

package netif_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/netif"
	"github.com/l4lb/l4lb/internal/testutil"
)

// TestNextHops: a backend on the segment resolves to its own MAC out of
// the lb's veth, one routed through a gateway to the gateway's; one with
// no neighbour entry yet is left out as unresolved, as is a local one.
func TestNextHops(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 2})
	h := openIn(t, d.LB.NS)
	n := h.NewNeighbors()
	t.Cleanup(func() { n.Close() })
	be1, be2 := d.Backends[0], d.Backends[1]
	if _, err := n.NextHops(nil); err != nil {
		t.Fatal(err)
	}
	hops, err := n.NextHops([]netip.Addr{be1.Addr4})
	if len(hops) != 0 || !errors.Is(err, netif.ErrUnresolved) {
		t.Fatalf("before any neighbour entry: %v, %v; want unresolved", hops, err)
	}
	d.Run(t, d.LB.NS, "ip", "neigh", "replace", be1.Addr4.String(), "lladdr", be1.MAC.String(), "dev", d.LB.Link, "nud", "reachable")
	d.Run(t, d.LB.NS, "ip", "neigh", "replace", be2.Addr4.String(), "lladdr", be2.MAC.String(), "dev", d.LB.Link, "nud", "reachable")
	routed := netip.MustParseAddr("198.18.99.7")
	d.Run(t, d.LB.NS, "ip", "route", "add", routed.String()+"/32", "via", be2.Addr4.String(), "dev", d.LB.Link)

	hops, err = n.NextHops([]netip.Addr{be1.Addr4, routed, d.LB.Addr4})
	if !errors.Is(err, netif.ErrLocal) || len(hops) != 2 {
		t.Fatalf("hops %v, err %v; want two, and the lb's own address refused as local", hops, err)
	}
	for _, c := range []struct {
		dst, via netip.Addr
		mac      net.HardwareAddr
	}{{be1.Addr4, be1.Addr4, be1.MAC}, {routed, be2.Addr4, be2.MAC}} {
		got := hops[c.dst]
		if got.Via != c.via || got.IfIndex <= 0 || got.DstMAC.String() != c.mac.String() || got.SrcMAC.String() != d.LB.MAC.String() || got.MTU != d.LB.MTU {
			t.Errorf("next hop of %v: %+v; want via %v, %v -> %v, mtu %d", c.dst, got, c.via, d.LB.MAC, c.mac, d.LB.MTU)
		}
	}
}

// TestWatch: a route or neighbour change in the handle's namespace sends
// a value; the watch holds its own namespace reference, so the handle may
// close first.
func TestWatch(t *testing.T) {
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 1})
	h, err := netif.OpenPath("/run/netns/" + d.LB.NS.Name)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	changes, err := h.Watch(done)
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	drainChanges(changes)
	for _, change := range [][]string{
		{"ip", "route", "add", "198.18.99.8/32", "via", d.Backends[0].Addr4.String(), "dev", d.LB.Link},
		{"ip", "neigh", "replace", "198.18.10.77", "lladdr", "02:00:00:00:00:77", "dev", d.LB.Link, "nud", "reachable"},
	} {
		// The subscriptions start on their own goroutines: repeat the
		// change until one is heard.
		deadline := time.Now().Add(10 * time.Second)
		for heard := false; !heard; {
			d.Run(t, d.LB.NS, change...)
			select {
			case <-changes:
				heard = true
			case <-time.After(200 * time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatalf("no change heard after %v", change)
				}
				change[2] = "replace"
			}
		}
		drainChanges(changes)
	}
}

// drainChanges empties changes of what is pending.
func drainChanges(changes <-chan struct{}) {
	for {
		select {
		case <-changes:
			time.Sleep(20 * time.Millisecond)
		default:
			return
		}
	}
}
