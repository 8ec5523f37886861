// Health probes of xdp VIPs take the VIP's forwarding: a backend that
// would lose every client packet fails them.

package main

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// tunnelProbe checks port 8080, which the backends serve on every
// address: a probe to a backend's own address passes whatever happens to
// the VIP's path, one through the VIP's forwarding only while it works.
var tunnelProbe = []string{`type = "tcp"`, `port = 8080`, `interval = "500ms"`, `timeout = "400ms"`, `rise = 2`, `fall = 2`}

// probeDownWithin bounds how long a backend that lost the VIP's path may
// stay up: fall x interval, a timeout, the jitter, and room for a loaded
// machine.
const probeDownWithin = 2*500*time.Millisecond + 400*time.Millisecond + 5*time.Second

// TestXDPProbeThroughTunnel: two backends behind an ipip xdp VIP. One
// loses its decap program: it goes down within fall x interval (its last
// check names the VIP it went to) and every new connection succeeds on
// the other; with decap back it comes up and takes new flows again. Then
// the other loses the VIP on its loopback, with the same outcome.
func TestXDPProbeThroughTunnel(t *testing.T) {
	n := newXDPNet(t, 2)
	c := newConf().raw(n.xdpTable("")).vip("web", n.vip4.String(), `mode = "xdp"`).health(tunnelProbe...)
	lb := startLBIn(t, n.LB.NS, n.backendsOn(c, 80, false, 0, 1).String())
	lb.waitHealth(t, "web", "be1", "up")
	lb.waitHealth(t, "web", "be2", "up")
	bin := mustBin(t)
	be1, be2 := n.Backends[0], n.Backends[1]

	be2.NS.MustExec(t, bin, "decap", "detach", "--iface", be2.Link)
	waitProbedDown(t, lb, n, "be2")
	allAnsweredBy(t, n, "be1")

	be2.NS.MustExec(t, bin, "decap", "attach", "--iface", be2.Link)
	lb.waitStatus(t, 10*time.Second, "be2 up again", func(st plane.Status) bool { return backendOf(st, "web", "be2").Health == "up" })
	seen := map[string]int{}
	testutil.Eventually(t, 10*time.Second, "both backends to answer again", func() bool {
		if name, err := tryAsk(n.DSR, n.vip4); err == nil {
			seen[name]++
		}
		return seen["be1"] > 0 && seen["be2"] > 0
	})

	vip := netip.PrefixFrom(n.VIP4, 32).String()
	be1.NS.MustExec(t, "ip", "addr", "del", vip, "dev", "lo")
	waitProbedDown(t, lb, n, "be1")
	allAnsweredBy(t, n, "be2")
}

// waitProbedDown waits (probeDownWithin at most) for web's backend id to
// go down with a last check that went to the VIP. A backend still up
// then fails the test with what new client connections meet.
func waitProbedDown(t *testing.T, lb *lbProcess, n *xdpNet, id string) {
	t.Helper()
	start := time.Now()
	for backendOf(lb.status(t), "web", id).Health != "down" {
		if time.Since(start) > probeDownWithin {
			failed := 0
			for range 30 {
				if _, err := tryAsk(n.DSR, n.vip4); err != nil {
					failed++
				}
			}
			t.Fatalf("%s still %s after %v (last check %q); %d of 30 new client connections failed",
				id, lb.backend(t, "web", id).Health, probeDownWithin, lb.backend(t, "web", id).LastCheck, failed)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s down after %v", id, time.Since(start).Round(time.Millisecond))
	waitDown(t, lb, id)
}

// waitDown waits for web's backend id to be down with a last check that
// went to the VIP.
func waitDown(t *testing.T, lb *lbProcess, id string) {
	t.Helper()
	lb.waitStatus(t, probeDownWithin, id+" down", func(st plane.Status) bool { return backendOf(st, "web", id).Health == "down" })
	vip := netip.MustParseAddrPort(lb.vip(t, "web").Listen).Addr()
	want := fmt.Sprintf("to the VIP %s", netip.AddrPortFrom(vip, 8080))
	if b := lb.backend(t, "web", id); !strings.Contains(b.LastCheck, want) {
		t.Errorf("%s's last check %q does not say it went %s", id, b.LastCheck, want)
	}
}

// allAnsweredBy opens 30 new connections to the VIP: every one must
// succeed, on backend name.
func allAnsweredBy(t *testing.T, n *xdpNet, name string) {
	t.Helper()
	for i := range 30 {
		got, err := tryAsk(n.DSR, n.vip4)
		if err != nil || got != name {
			t.Fatalf("connection %d: answered by %q (%v), want %s", i, got, err, name)
		}
	}
}

// TestXDPProbeForwarding: the probes take each forwarding the VIP uses:
// an l2 VIP's backend without the VIP on its loopback goes down (the
// probe went to the VIP at its MAC), an IPv6 ipip VIP's backend without
// decap likewise (IPv6 in IPv6); each comes back once repaired.
func TestXDPProbeForwarding(t *testing.T) {
	n := newXDPNet(t, 2)
	bin := mustBin(t)
	be := n.Backends[1]
	for _, c := range []struct {
		name          string
		vip           netip.AddrPort
		v6            bool
		keys          []string
		break_, mend_ []string
	}{
		{"l2", n.vip4, false, []string{`forward = "l2"`},
			[]string{"ip", "addr", "del", netip.PrefixFrom(n.VIP4, 32).String(), "dev", "lo"},
			[]string{"ip", "addr", "add", netip.PrefixFrom(n.VIP4, 32).String(), "dev", "lo"}},
		{"ipip6", n.vip6, true, nil,
			[]string{bin, "decap", "detach", "--iface", be.Link},
			[]string{bin, "decap", "attach", "--iface", be.Link}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf := newConf().raw(n.xdpTable("")).vip("web", c.vip.String(), append([]string{`mode = "xdp"`}, c.keys...)...).health(tunnelProbe...)
			lb := startLBIn(t, n.LB.NS, n.backendsOn(conf, 80, c.v6, 0, 1).String())
			lb.waitHealth(t, "web", "be1", "up")
			lb.waitHealth(t, "web", "be2", "up")
			be.NS.MustExec(t, c.break_...)
			waitDown(t, lb, "be2")
			be.NS.MustExec(t, c.mend_...)
			lb.waitStatus(t, 10*time.Second, "be2 up again", func(st plane.Status) bool { return backendOf(st, "web", "be2").Health == "up" })
			lb.killAll(t)
		})
	}
}
