package testutil

import (
	"fmt"
	"net/netip"
	"testing"
)

// Topology is the standard test network: a client, a balancer host and
// backends, each in its own namespace, all in 198.18.0.0/15.
//
//	client 198.18.0.2/24 --veth-- lb 198.18.0.1/24
//	lb br0 198.18.1.1/24 --veth-- backend i 198.18.1.(11+i)/24
//	VIP 198.18.2.10 on the balancer's lo; ip_forward on in lb.
type Topology struct {
	Client   *Netns
	LB       *Netns
	Backends []*Netns
	VIP      netip.Addr
	LBAddr   netip.Addr
	ClientIP netip.Addr
}

// BackendIP returns backend i's address.
func (tp *Topology) BackendIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, 1, byte(11 + i)})
}

// NewTopology builds the standard network with n backends.
func NewTopology(t testing.TB, n int) *Topology {
	t.Helper()
	tp := &Topology{
		Client:   NewNetns(t, "cli"),
		LB:       NewNetns(t, "lb"),
		VIP:      netip.MustParseAddr("198.18.2.10"),
		LBAddr:   netip.MustParseAddr("198.18.0.1"),
		ClientIP: netip.MustParseAddr("198.18.0.2"),
	}
	Veth(t, tp.Client, "c0", "198.18.0.2/24", tp.LB, "x0", "198.18.0.1/24")
	tp.Client.MustExec(t, "ip", "route", "add", "default", "via", "198.18.0.1")
	tp.LB.MustExec(t, "ip", "addr", "add", "198.18.2.10/32", "dev", "lo")
	tp.LB.MustExec(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	tp.LB.MustExec(t, "ip", "link", "add", "br0", "type", "bridge")
	tp.LB.MustExec(t, "ip", "addr", "add", "198.18.1.1/24", "dev", "br0")
	tp.LB.MustExec(t, "ip", "link", "set", "br0", "up")
	for i := 0; i < n; i++ {
		b := NewNetns(t, fmt.Sprintf("be%d", i))
		port := fmt.Sprintf("xb%d", i)
		Veth(t, tp.LB, port, "", b, "b0", tp.BackendIP(i).String()+"/24")
		tp.LB.MustExec(t, "ip", "link", "set", port, "master", "br0")
		b.MustExec(t, "ip", "route", "add", "default", "via", "198.18.1.1")
		tp.Backends = append(tp.Backends, b)
	}
	return tp
}
