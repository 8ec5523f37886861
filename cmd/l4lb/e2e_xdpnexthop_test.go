// The ipip next hops the control plane writes for the XDP program (the
// nexthops map) follow the kernel's neighbours and routes.

package main

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// nextHopFollow is how soon a neighbour or route change must reach the
// nexthops map: the control loop hears it over netlink (its safety-net
// resync runs every 2 s, so meeting this bound shows the notification
// path works).
const nextHopFollow = time.Second

// TestXDPNextHopFollowsNeighboursAndRoutes: an ipip backend's nexthops
// entry holds its neighbour's MAC; when that MAC changes, or the route to
// the backend moves to a gateway (here be2, whose decap takes the packets
// in), the entry follows within a second and packets go the new way.
func TestXDPNextHopFollowsNeighboursAndRoutes(t *testing.T) {
	n := newXDPNet(t, 2)
	startLBIn(t, n.LB.NS, n.config("", "", 0))
	be1, be2 := n.Backends[0], n.Backends[1]
	if name := n.AskUDP(t, n.vip4); name != "be1" {
		t.Fatalf("udp answered by %q", name)
	}
	hops := openNextHops(t, xdpProgram(t, n), be1.Addr4)
	hops.waitMAC(t, be1.MAC, 5*time.Second)

	// be1 gets a new MAC, and the balancer's neighbour table learns it
	// (set by hand here: the kernel would re-probe only after its
	// reachable time).
	mac := net.HardwareAddr{0x02, 0x4c, 0x34, 0x10, 0x00, 0x99}
	n.Run(t, be1.NS, "ip", "link", "set", "dev", be1.Link, "address", mac.String())
	n.Run(t, n.LB.NS, "ip", "neigh", "replace", be1.Addr4.String(), "lladdr", mac.String(), "dev", n.LB.Link, "nud", "permanent")
	hops.waitMAC(t, mac, nextHopFollow)
	if name := n.AskUDP(t, n.vip4); name != "be1" {
		t.Fatalf("after the MAC change: answered by %q", name)
	}

	// The route to be1 moves to a gateway, be2.
	n.Run(t, n.LB.NS, "ip", "route", "add", be1.Addr4.String()+"/32", "via", be2.Addr4.String(), "dev", n.LB.Link)
	hops.waitMAC(t, be2.MAC, nextHopFollow)
	if name := n.AskUDP(t, n.vip4); name != "be2" {
		t.Fatalf("with be1 routed via be2: answered by %q, want be2 (its decap takes be1's packets)", name)
	}
	n.Run(t, n.LB.NS, "ip", "route", "del", be1.Addr4.String()+"/32")
	hops.waitMAC(t, mac, nextHopFollow)
	if name := n.AskUDP(t, n.vip4); name != "be1" {
		t.Fatalf("route back: answered by %q", name)
	}
}

// nextHopsEntry is one backend's entry in the running program's nexthops
// map.
type nextHopsEntry struct {
	m   *ebpf.Map
	idx uint32
}

// openNextHops finds prog's nexthops map and the backend index of addr
// (from its backends map).
func openNextHops(t *testing.T, prog *ebpf.Program, addr netip.Addr) nextHopsEntry {
	t.Helper()
	maps := map[string]*ebpf.Map{}
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		if mi, err := m.Info(); err == nil {
			maps[mi.Name] = m
		}
	}
	if maps["nexthops"] == nil || maps["backends"] == nil {
		t.Fatalf("the program's maps %v lack nexthops or backends", maps)
	}
	want := addr.Unmap().As16()
	var idx uint32
	var val []byte
	it := maps["backends"].Iterate()
	for it.Next(&idx, &val) {
		if bytes.Equal(val[:16], want[:]) && val[22] != 0 { // addr[16], mac[6], family
			return nextHopsEntry{m: maps["nexthops"], idx: idx}
		}
	}
	t.Fatalf("no backend entry for %v (%v)", addr, it.Err())
	return nextHopsEntry{}
}

// waitMAC waits up to within for the entry to be valid with destination
// MAC mac.
func (e nextHopsEntry) waitMAC(t *testing.T, mac net.HardwareAddr, within time.Duration) {
	t.Helper()
	start := time.Now()
	var val []byte
	for {
		if err := e.m.Lookup(e.idx, &val); err != nil {
			t.Fatal(err)
		}
		if val[20] == 1 && bytes.Equal(val[:6], mac) { // dmac[6] ... valid at 20
			return
		}
		if time.Since(start) > within {
			t.Fatalf("next hop of backend %d: %x after %v, want valid with MAC %v", e.idx, val, within, mac)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
