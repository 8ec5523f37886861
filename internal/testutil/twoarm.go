// twoarm.go: a two-arm network: the balancer between a client segment and a backend segment (IPv4).

package testutil

import (
	"fmt"
	"net/netip"
	"testing"
)

// TwoArm is the two-arm shape of a balancer host: clients reach it on one
// interface, backends sit behind another, and the balancer is the
// backends' router back to the clients. The hosts are a DSR's (its helpers
// serve, dial and ask as on a DSR network), on two bridges:
//
//	client 198.18.20.2/24  ─ br0 ─ lb veth0 198.18.20.1/24
//	lb veth1 198.18.21.1/24 ─ br1 ─ be<i> 198.18.21.(10+i)/24, default via 198.18.21.1
//
// The client routes the VIP (198.18.100.1) to the lb, which forwards
// (ip_forward, no redirects) and has neither the VIP nor a route to it:
// a VIP packet that reaches a backend went through XDP. Backends have the
// VIP on lo and rp_filter=0, arp_ignore=1, arp_announce=2; every veth has
// tx checksum offload off, and the bridge-side peers of the lb's two arms
// and of the backends an XDP_PASS program (a native redirect into a veth
// needs one on its peer).
type TwoArm struct {
	*DSR
	Back     *DSRHost     // the lb's backend arm: Link "veth1" in the lb's namespace, Addr4 198.18.21.1
	BackNet4 netip.Prefix // 198.18.21.0/24
}

// Address plan of a two-arm network.
var (
	twoArmFront4 = netip.MustParsePrefix("198.18.20.0/24")
	twoArmBack4  = netip.MustParsePrefix("198.18.21.0/24")
)

// NewTwoArm builds a two-arm network with backends hosts (0 means 2); it
// is removed on cleanup.
func NewTwoArm(t testing.TB, backends int) *TwoArm {
	t.Helper()
	RequirePriv(t, "network namespaces, veth, bridge and XDP")
	opts := DSROptions{Backends: backends}.withDefaults()
	if err := opts.validate(); err != nil {
		t.Fatalf("two-arm: %v", err)
	}
	d := planDSR(opts)
	d.Net4 = twoArmFront4
	d.LB.Addr4, d.Client.Addr4 = hostAddr(twoArmFront4, 1), hostAddr(twoArmFront4, 2)
	for i, b := range d.Backends {
		b.Addr4, b.Port = hostAddr(twoArmBack4, 11+i), "sw1-"+b.Name
	}
	back := &DSRHost{Name: "lb", Link: "veth1", Port: "sw1-lb", MTU: opts.MTU, Addr4: hostAddr(twoArmBack4, 1)}
	back.MAC = d.LB.MAC
	back.MAC = append(back.MAC[:5:5], 0x99)
	ta := &TwoArm{DSR: d, Back: back, BackNet4: twoArmBack4}
	d.makeNamespaces(t)
	back.NS = d.LB.NS
	d.presetSysctls(t)
	d.makeLinks(t)
	rootBatch(t, fmt.Sprintf("link add %s netns %s mtu %d address %s type veth peer name %s netns %s mtu %d",
		back.Link, back.NS.Name, back.MTU, back.MAC, back.Port, d.Switch.Name, back.MTU))
	ta.configure(t)
	d.hostSysctls(t)
	setSysctls(t, d.LB.NS, "net.ipv4.conf."+back.Link+".send_redirects=0")
	for _, h := range append(d.Hosts(), back) {
		TxChecksumOff(t, h.NS, h.Link)
	}
	for _, h := range append([]*DSRHost{d.LB, back}, d.Backends...) {
		AttachPassXDP(t, d.Switch, h.Port)
	}
	return ta
}

// configure sets up the two bridges and every host's addresses and routes.
func (ta *TwoArm) configure(t testing.TB) {
	t.Helper()
	d := ta.DSR
	sw := []string{"link add br0 type bridge mcast_snooping 0", "link set br0 up", "link add br1 type bridge mcast_snooping 0", "link set br1 up"}
	for _, h := range []*DSRHost{d.Client, d.LB} {
		sw = append(sw, "link set "+h.Port+" master br0", "link set "+h.Port+" up")
	}
	for _, h := range append([]*DSRHost{ta.Back}, d.Backends...) {
		sw = append(sw, "link set "+h.Port+" master br1", "link set "+h.Port+" up")
	}
	ipBatch(t, d.Switch, sw...)
	ipBatch(t, d.Client.NS, d.hostLines(d.Client)...)
	ipBatch(t, d.LB.NS, append(d.hostLines(d.LB),
		fmt.Sprintf("addr add %s/%d dev %s", ta.Back.Addr4, ta.BackNet4.Bits(), ta.Back.Link), "link set "+ta.Back.Link+" up")...)
	for _, b := range d.Backends {
		ipBatch(t, b.NS, append(d.hostLines(b), "route add default via "+ta.Back.Addr4.String())...)
	}
}
