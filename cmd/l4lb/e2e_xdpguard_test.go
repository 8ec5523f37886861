// End to end: the XDP program's access lists, for an xdp VIP and for a
// proxy VIP it guards.

package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// dialTCPFrom connects from src (an address of the client) to addr with a
// short timeout; it returns the connection or the dial error.
func dialTCPFrom(t *testing.T, n *xdpNet, src netip.Addr, addr netip.AddrPort, timeout time.Duration) (*net.TCPConn, error) {
	t.Helper()
	var c net.Conn
	var err error
	n.InNS(t, n.Client.NS, func() {
		d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
		c, err = d.Dial("tcp", addr.String())
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn), nil
}

// greeting reads the NamedEcho greeting: the backend's name.
func greeting(t *testing.T, c *net.TCPConn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 64)
	k, err := c.Read(b)
	if err != nil {
		t.Fatalf("greeting: %v", err)
	}
	return strings.TrimSpace(string(b[:k]))
}

// TestXDPAccessList: with deny = [the second client address] on an xdp VIP
// and a proxy VIP, the denied address gets no answer at all (its SYNs are
// dropped in XDP: a timeout, not a reset) while the client's first address
// is served; status and metrics count the drops per VIP and globally; a
// reload that lifts the deny lets the address in.
func TestXDPAccessList(t *testing.T) {
	n := newXDPNet(t, 2)
	denied := netip.MustParseAddr("198.18.10.3")
	n.Run(t, n.Client.NS, "ip", "addr", "add", denied.String()+"/24", "dev", n.Client.Link)
	allowed := n.Client.Addr4
	proxyAddr := netip.AddrPortFrom(n.LB.Addr4, 8080)
	deny := fmt.Sprintf("deny = [\"%s/32\"]\n", denied)
	proxy := fmt.Sprintf("[[vip]]\nname = \"proxy\"\nlisten = \"%s\"\n%s  [[vip.backend]]\n  address = \"%s:8080\"\n", proxyAddr, deny, n.Backends[0].Addr4)
	metricsAddr := netip.AddrPortFrom(n.LB.Addr4, 9371)
	cfg := n.config("", proxy, 0, 1)
	cfg = strings.Replace(cfg, "name = \"web4\"\n", "name = \"web4\"\n"+deny, 1)
	cfg = strings.Replace(cfg, "[global]\n", fmt.Sprintf("[global]\nmetrics_listen = %q\n", metricsAddr), 1)
	lb := startLBIn(t, n.LB.NS, cfg)

	for _, vip := range []netip.AddrPort{n.vip4, proxyAddr} {
		c, err := dialTCPFrom(t, n, allowed, vip, 5*time.Second)
		if err != nil {
			t.Fatalf("allowed client to %s: %v", vip, err)
		}
		if name := greeting(t, c); !strings.HasPrefix(name, "be") {
			t.Fatalf("allowed client to %s answered by %q", vip, name)
		}
		for range 2 { // the kernel retransmits the SYN once within the timeout
			_, err = dialTCPFrom(t, n, denied, vip, 1500*time.Millisecond)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("denied client to %s: %v, want a timeout (SYN dropped, no reset)", vip, err)
			}
		}
	}

	st := lb.status(t)
	web := mustVIP(t, st, "web4")
	if web.XDP == nil || web.XDP.ACLDrops < 2 || web.XDP.Drops < web.XDP.ACLDrops {
		t.Fatalf("web4 xdp counters: %+v", web.XDP)
	}
	if st.XDP == nil || st.XDP.Counters["drop_acl"] < 4 {
		t.Fatalf("global xdp counters: %+v", st.XDP)
	}
	pv := lb.vip(t, "proxy")
	if pv.XDPGuard == nil || pv.XDPGuard.ACLDrops < 2 {
		t.Fatalf("proxy VIP guard counters: %+v", pv.XDPGuard)
	}
	metrics := scrape(t, n.LB.NS, metricsAddr, "/metrics")
	for _, want := range []string{`l4lb_vip_xdp_acl_drops_total{protocol="tcp",vip="web4"} `, `l4lb_vip_xdp_acl_drops_total{protocol="tcp",vip="proxy"} `,
		`l4lb_xdp_events_total{event="drop_acl"} `, `l4lb_vip_xdp_untracked_total{protocol="tcp",vip="web4"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	text, _, _ := lb.run(t, "status")
	if !strings.Contains(text, "xdp guards: acl-drops") {
		t.Errorf("status text lacks the guard counters:\n%s", text)
	}

	if e := explainJSON(t, lb, "web4", denied.String()+":4000"); !strings.Contains(strings.Join(e.Notes, "\n"), "allow/deny refuses "+denied.String()) {
		t.Errorf("explain for the denied client lacks the refusal: %v", e.Notes)
	}
	if e := explainJSON(t, lb, "web4", allowed.String()+":4000"); strings.Contains(strings.Join(e.Notes, "\n"), "refuses") {
		t.Errorf("explain for an allowed client: %v", e.Notes)
	}

	// A reload lifts the deny on web4: the address gets in.
	lb.writeConfig(t, strings.Replace(lb.currentConfig(t), "name = \"web4\"\n"+deny, "name = \"web4\"\n", 1))
	lb.reloadOK(t)
	testutil.Eventually(t, 10*time.Second, "the denied address to reach web4 after the reload", func() bool {
		c, err := dialTCPFrom(t, n, denied, n.vip4, time.Second)
		return err == nil && strings.HasPrefix(greeting(t, c), "be")
	})
}
