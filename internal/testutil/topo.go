package testutil

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
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

// NewTopology builds the standard network with n backends. Commands go in
// one `ip -batch` per namespace: on a loaded machine each ip process costs
// tens of milliseconds.
func NewTopology(t testing.TB, n int) *Topology {
	t.Helper()
	tp := &Topology{
		Client:   NewNetns(t, "cli"),
		LB:       NewNetns(t, "lb"),
		VIP:      netip.MustParseAddr("198.18.2.10"),
		LBAddr:   netip.MustParseAddr("198.18.0.1"),
		ClientIP: netip.MustParseAddr("198.18.0.2"),
	}
	links := []string{fmt.Sprintf("link add c0 netns %s type veth peer name x0 netns %s", tp.Client.Name, tp.LB.Name)}
	for i := 0; i < n; i++ {
		b := NewNetns(t, fmt.Sprintf("be%d", i))
		tp.Backends = append(tp.Backends, b)
		links = append(links, fmt.Sprintf("link add xb%d netns %s type veth peer name b0 netns %s", i, tp.LB.Name, b.Name))
	}
	rootBatch(t, links...)
	ipBatch(t, tp.Client, "addr add 198.18.0.2/24 dev c0", "link set c0 up", "route add default via 198.18.0.1")
	lb := []string{
		"addr add 198.18.0.1/24 dev x0", "link set x0 up", "addr add 198.18.2.10/32 dev lo",
		"link add br0 type bridge", "addr add 198.18.1.1/24 dev br0", "link set br0 up",
	}
	for i, b := range tp.Backends {
		lb = append(lb, fmt.Sprintf("link set xb%d master br0", i), fmt.Sprintf("link set xb%d up", i))
		ipBatch(t, b, fmt.Sprintf("addr add %s/24 dev b0", tp.BackendIP(i)), "link set b0 up", "route add default via 198.18.1.1")
	}
	ipBatch(t, tp.LB, lb...)
	setSysctls(t, tp.LB, "net.ipv4.ip_forward=1")
	return tp
}

// rootBatch runs ip commands that create links inside test namespaces; it
// never changes an interface of the root namespace itself.
func rootBatch(t testing.TB, lines ...string) {
	t.Helper()
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -batch: %v: %s", err, out)
	}
}
