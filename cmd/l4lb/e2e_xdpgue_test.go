// End to end: an xdp VIP with forward = "gue" and per-flow outer sources
// ([xdp] source_prefix4/6), decapsulated by `l4lb decap attach`.

package main

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// TestXDPGUE: 1 MiB echoes through GUE VIPs of both families come back
// byte for byte, from several flows, and the backends' decap counted GUE
// of both families (and no IP-in-IP): the config reached the program.
func TestXDPGUE(t *testing.T) {
	n := newXDPNet(t, 2)
	c := newConf().raw(n.xdpTable("source_prefix4 = \"198.18.77.0/24\"\nsource_prefix6 = \"2001:db8:77::/64\"\ngue_port = 6080"))
	for name, vip := range map[string]netip.AddrPort{"gue4": n.vip4, "gue6": n.vip6} {
		c.vip(name, vip.String(), `mode = "xdp"`, `forward = "gue"`).health(`type = "none"`)
		n.backendsOn(c, 80, vip.Addr().Is6(), 0, 1)
	}
	startLBIn(t, n.LB.NS, c.String())
	msg := make([]byte, 1<<20)
	rand.Read(msg)
	for _, vip := range []netip.AddrPort{n.vip4, n.vip6} {
		// The first packets may meet unresolved backend neighbours.
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%v to answer", vip), func() bool { _, err := tryAsk(n.DSR, vip); return err == nil })
		for range 3 {
			conn, r, _ := n.askTCPConn(t, vip)
			echo(t, conn, r, msg)
			conn.Close()
		}
	}
	var gue4, gue6, ipip uint64
	for _, b := range n.Backends {
		out, code := runIn(t, b.NS, "", "decap", "status", "--iface", b.Link)
		if code != 0 {
			t.Fatalf("decap status on %s: exit %d\n%s", b.Name, code, out)
		}
		gue4 += statusCount(t, out, "gue ipv4 outer")
		gue6 += statusCount(t, out, "gue ipv6 outer")
		ipip += statusCount(t, out, "ipv4 outer") + statusCount(t, out, "ipv6 outer")
	}
	if gue4 < 100 || gue6 < 100 || ipip != 0 {
		t.Fatalf("backends stripped gue v4 %d, gue v6 %d, ipip %d: want GUE of both families only", gue4, gue6, ipip)
	}
}

// statusCount reads "<what> N" from a decap status line ("ipv4 outer"
// is not "gue ipv4 outer").
func statusCount(t *testing.T, out, what string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`(?:^|, |: )` + regexp.QuoteMeta(what) + ` (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in %q", what, out)
	}
	v, _ := strconv.ParseUint(m[1], 10, 64)
	return v
}
