// The ECMP network: a client, a BGP router, several balancers, backends.

package testutil

import (
	"fmt"
	"net/netip"
	"testing"
)

// ECMP is the scale-out test network, all in 198.18.0.0/15:
//
//	client 198.18.0.2 -- 198.18.0.1 router (BIRD) 198.18.3.1 -- br -- balancer i 198.18.3.(10+i)
//	balancer i 198.18.1.(2+i) -- router's br1 198.18.1.1 -- backend j 198.18.1.(11+j)
//
// The router learns the VIPs from the balancers over BGP and spreads
// flows over them by a hash of the 5-tuple (fib_multipath_hash_policy 3,
// fields 0x0037: addresses, protocol and ports). Every balancer holds the
// VIPs on lo and has a leg on the backends' network, so that replies of
// proxied connections go back to the balancer that made them.
type ECMP struct {
	Client, Router *Netns
	LBs, Backends  []*Netns
	ClientIP       netip.Addr
	RouterID       netip.Addr // the router's address on the balancers' network
}

// LBAddr is balancer i's address on the router's side (its next hop).
func (e *ECMP) LBAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 3, byte(10 + i)}) }

// BackendIP is backend j's address.
func (e *ECMP) BackendIP(j int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 1, byte(11 + j)}) }

// NewECMP builds the network with lbs balancers and n backends; vips go
// on every balancer's lo.
func NewECMP(t testing.TB, lbs, n int, vips ...netip.Addr) *ECMP {
	t.Helper()
	e := &ECMP{Client: NewNetns(t, "cli"), Router: NewNetns(t, "rtr"), ClientIP: netip.MustParseAddr("198.18.0.2"), RouterID: netip.MustParseAddr("198.18.3.1")}
	links := []string{fmt.Sprintf("link add c0 netns %s type veth peer name r0 netns %s", e.Client.Name, e.Router.Name)}
	rtr := []string{"addr add 198.18.0.1/24 dev r0", "link set r0 up",
		"link add br0 type bridge", "addr add 198.18.3.1/24 dev br0", "link set br0 up",
		"link add br1 type bridge", "addr add 198.18.1.1/24 dev br1", "link set br1 up"}
	for i := range lbs {
		lb := NewNetns(t, fmt.Sprintf("lb%d", i))
		e.LBs = append(e.LBs, lb)
		links = append(links, fmt.Sprintf("link add xl%d netns %s type veth peer name x0 netns %s", i, e.Router.Name, lb.Name),
			fmt.Sprintf("link add yl%d netns %s type veth peer name y0 netns %s", i, e.Router.Name, lb.Name))
		rtr = append(rtr, fmt.Sprintf("link set xl%d master br0", i), fmt.Sprintf("link set xl%d up", i),
			fmt.Sprintf("link set yl%d master br1", i), fmt.Sprintf("link set yl%d up", i))
	}
	for j := range n {
		b := NewNetns(t, fmt.Sprintf("be%d", j))
		e.Backends = append(e.Backends, b)
		links = append(links, fmt.Sprintf("link add yb%d netns %s type veth peer name b0 netns %s", j, e.Router.Name, b.Name))
		rtr = append(rtr, fmt.Sprintf("link set yb%d master br1", j), fmt.Sprintf("link set yb%d up", j))
	}
	rootBatch(t, links...)
	ipBatch(t, e.Client, "addr add 198.18.0.2/24 dev c0", "link set c0 up", "route add default via 198.18.0.1")
	ipBatch(t, e.Router, rtr...)
	setSysctls(t, e.Router, "net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=3", "net.ipv4.fib_multipath_hash_fields=0x0037")
	for i, lb := range e.LBs {
		lines := []string{fmt.Sprintf("addr add %s/24 dev x0", e.LBAddr(i)), "link set x0 up",
			fmt.Sprintf("addr add 198.18.1.%d/24 dev y0", 2+i), "link set y0 up", "route add default via 198.18.3.1"}
		for _, v := range vips {
			lines = append(lines, fmt.Sprintf("addr add %s/32 dev lo", v))
		}
		ipBatch(t, lb, lines...)
	}
	for j, b := range e.Backends {
		ipBatch(t, b, fmt.Sprintf("addr add %s/24 dev b0", e.BackendIP(j)), "link set b0 up", "route add default via 198.18.1.1")
	}
	return e
}

// StartRouter runs BIRD in the router with one eBGP neighbour per
// balancer (AS lbASN; the router is AS 65000) and the given hold time.
func (e *ECMP) StartRouter(t testing.TB, lbASN uint32, holdSeconds int) *Bird {
	t.Helper()
	var ns []BirdNeighbor
	for i := range e.LBs {
		ns = append(ns, BirdNeighbor{Name: fmt.Sprintf("lb%d", i), Addr: e.LBAddr(i), ASN: lbASN})
	}
	return StartBird(t, e.Router, BirdConfig(e.RouterID, 65000, holdSeconds, ns...))
}
