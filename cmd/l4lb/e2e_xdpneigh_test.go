// End to end: the neighbour entries a killed l4lb left for its backends'
// next hops are removed by the next l4lb when its config no longer needs
// them; the operator's own entries are never touched.

package main

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/netif"
	"github.com/l4lb/l4lb/internal/testutil"
)

// lbNeighbors returns the lb's neighbour entries on its link as `ip -d
// neigh` prints them, by address.
func (n *xdpNet) lbNeighbors(t *testing.T) map[netip.Addr]string {
	t.Helper()
	out := n.Run(t, n.LB.NS, "ip", "-d", "neigh", "show", "dev", n.LB.Link)
	m := map[netip.Addr]string{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 {
			m[netip.MustParseAddr(f[0])] = strings.TrimSpace(line)
		}
	}
	return m
}

// marked lists the addresses whose entry carries l4lb's mark, sorted.
func marked(entries map[netip.Addr]string) []netip.Addr {
	var out []netip.Addr
	for a, line := range entries {
		if strings.Contains(line, "proto "+strconv.Itoa(netif.NeighProtocol)) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// TestXDPNeighborsSweptAfterKill: l4lb marks the managed neighbour
// entries of its backends; after a kill -9 they stay; the next l4lb,
// whose config dropped be3, removes be3's entries and keeps the others,
// and leaves the operator's static and unmarked managed entries alone.
func TestXDPNeighborsSweptAfterKill(t *testing.T) {
	n := newXDPNet(t, 3)
	be := n.Backends
	all := []netip.Addr{be[0].Addr4, be[0].Addr6, be[1].Addr4, be[1].Addr6, be[2].Addr4, be[2].Addr6}
	slices.SortFunc(all, netip.Addr.Compare)
	static, unmarked := netip.MustParseAddr("198.18.10.200"), netip.MustParseAddr("198.18.10.201")
	n.Run(t, n.LB.NS, "ip", "neigh", "add", static.String(), "dev", n.LB.Link, "lladdr", "02:00:00:00:00:99", "nud", "permanent")
	n.Run(t, n.LB.NS, "ip", "neigh", "replace", unmarked.String(), "dev", n.LB.Link, "managed")
	operators := n.lbNeighbors(t)

	lb := startLBIn(t, n.LB.NS, n.config("", "", 0, 1, 2))
	testutil.Eventually(t, 10*time.Second, "marked entries for every backend", func() bool {
		return slices.Equal(marked(n.lbNeighbors(t)), all)
	})
	lb.cmd.Process.Kill()
	<-lb.exited
	if got := marked(n.lbNeighbors(t)); !slices.Equal(got, all) {
		t.Fatalf("after kill -9: marked entries %v, want all of %v left behind (the test shows nothing)", got, all)
	}

	lb2 := startLBIn(t, n.LB.NS, n.config("", "", 0, 1))
	lb2.waitLog(t, "removed neighbour entries an earlier l4lb left")
	entries := n.lbNeighbors(t)
	want := []netip.Addr{be[0].Addr4, be[0].Addr6, be[1].Addr4, be[1].Addr6}
	slices.SortFunc(want, netip.Addr.Compare)
	if got := marked(entries); !slices.Equal(got, want) {
		t.Errorf("after the restart: marked entries %v, want %v", got, want)
	}
	for _, a := range []netip.Addr{be[2].Addr4, be[2].Addr6} {
		if line, ok := entries[a]; ok {
			t.Errorf("be3's entry stayed: %s", line)
		}
	}
	if entries[static] != operators[static] {
		t.Errorf("operator's static entry changed: %q -> %q", operators[static], entries[static])
	}
	if line := entries[unmarked]; !strings.Contains(line, "managed") || strings.Contains(line, "proto") {
		t.Errorf("operator's managed entry changed: %q -> %q", operators[unmarked], line)
	}
	if name := n.AskTCP(t, n.vip4); name != "be1" && name != "be2" {
		t.Errorf("after the restart the VIP answered from %q", name)
	}
}
