// A named backend on an xdp VIP: the answer's addresses of the VIP's
// family become Maglev backends, and a changed answer is applied as a
// reload (established flows stay on a removed backend).

package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

func TestXDPNamedBackends(t *testing.T) {
	n := newXDPNet(t, 3)
	dns := testutil.StartDNSServer(t, n.LB.NS, n.LB.Addr4.String()+":53")
	be := n.Backends
	// AAAA records too: the IPv4 VIP must use only the A records.
	dns.SetHost("web.test", 1, be[0].Addr4, be[1].Addr4, be[0].Addr6, be[1].Addr6)
	cfg := newConf(`drain_timeout = "2s"`, fmt.Sprintf("resolvers = [%q]", n.LB.Addr4), `resolve_min = "200ms"`, `resolve_max = "1s"`).raw(n.xdpTable("")).
		vip("web4", n.vip4.String(), `mode = "xdp"`).health(xdpProbe...).at("", "web.test:80")
	lb := startLBIn(t, n.LB.NS, cfg.String())
	addrs := func() []string {
		v := lb.vip(t, "web4")
		var out []string
		for _, b := range v.Backends {
			if !b.Removed {
				out = append(out, b.Address)
			}
		}
		slices.Sort(out)
		return out
	}
	want := func(is ...int) []string {
		var out []string
		for _, i := range is {
			out = append(out, fmt.Sprintf("%s:80", be[i].Addr4))
		}
		slices.Sort(out)
		return out
	}
	if got := addrs(); !slices.Equal(got, want(0, 1)) {
		t.Fatalf("backends at start: %v, want %v", got, want(0, 1))
	}
	c, r, victim := n.askTCPConn(t, n.vip4)
	echo(t, c, r, []byte("before"))
	keep := 2
	for i := range 2 {
		if be[i].Name != victim {
			keep = i
		}
	}
	dns.SetHost("web.test", 1, be[keep].Addr4, be[2].Addr4)
	testutil.Eventually(t, 10*time.Second, "the answer's change reaches the VIP", func() bool {
		return slices.Equal(addrs(), want(keep, 2))
	})
	echo(t, c, r, []byte("after DNS removed my backend"))
	seen := map[string]int{}
	for range 30 {
		seen[n.AskTCP(t, n.vip4)]++
	}
	if seen[victim] != 0 || seen[be[2].Name] == 0 {
		t.Fatalf("new flows after the change: %v (removed %s, added %s)", seen, victim, be[2].Name)
	}
}
