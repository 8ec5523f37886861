// End to end: least_conn and least_time on an xdp VIP, through the binary
// with real backends. The program picks from a Maglev table whose weights
// l4lb rescales every weight_refresh from the flow table's live flows
// (and the probes' RTTs), a bounded step at a time: new flows shift,
// established ones stay.

package main

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4/plane"
)

// weightsConf is one xdp TCP VIP "w" on the network's IPv4 VIP over be1
// and be2 with algorithm alg, weights rescaled every second, probed as
// the other xdp tests probe (which measures RTTs).
func (n *xdpNet) weightsConf(alg string) string {
	c := newConf(`drain_timeout = "2s"`).raw(n.xdpTable(`weight_refresh = "1s"`))
	c.vip("w", n.vip4.String(), `mode = "xdp"`, fmt.Sprintf("algorithm = %q", alg)).health(xdpProbe...)
	return n.backendsOn(c, 80, false, 0, 1).String()
}

// waitPreferred waits until status gives backend to at least ratio times
// the effective weight of backend from.
func waitPreferred(t *testing.T, lb *lbProcess, from, to string, ratio uint32) {
	t.Helper()
	lb.waitStatus(t, 30*time.Second, fmt.Sprintf("%s's effective weight %dx %s's", to, ratio, from), func(st plane.Status) bool {
		f, g := backendOf(st, "w", from), backendOf(st, "w", to)
		return f.EffectiveWeight > 0 && g.EffectiveWeight >= ratio*f.EffectiveWeight
	})
}

// newFlowsTo opens n short connections to the VIP (each closed at once,
// so none stays live) and counts the backends that answered.
func (n *xdpNet) newFlowsTo(t *testing.T, count int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range count {
		seen[n.AskTCP(t, n.vip4)]++
	}
	t.Logf("%d new flows: %v", count, seen)
	return seen
}

// TestXDPLeastConnFollowsLiveFlows: long-lived flows on be1 (status counts
// them from the flow table) make the xdp least_conn VIP give be2 the
// larger share of its table, and new flows mostly go to be2; the
// established ones stay where they are.
func TestXDPLeastConnFollowsLiveFlows(t *testing.T) {
	n := newXDPNet(t, 2)
	lb := startLBIn(t, n.LB.NS, n.weightsConf("least_conn"))
	lb.waitHealth(t, "w", "be2", "up")

	const held = 20
	var kept []*heldConn
	for tries := 0; len(kept) < held; tries++ {
		if tries == 400 {
			t.Fatalf("only %d of 400 connections landed on be1", len(kept))
		}
		c, r, name := n.askTCPConn(t, n.vip4)
		if name != "be1" {
			c.Close()
			continue
		}
		kept = append(kept, &heldConn{c, r})
	}
	lb.waitStatus(t, 10*time.Second, "be1's held flows counted", func(st plane.Status) bool {
		return backendOf(st, "w", "be1").LiveFlows >= held
	})
	waitPreferred(t, lb, "be1", "be2", 4)
	seen := n.newFlowsTo(t, 100)
	if seen["be2"] < 65 {
		t.Errorf("100 new flows with %d live on be1 and none on be2: %v, want most on be2", held, seen)
	}
	for i, h := range kept {
		echo(t, h.c, h.r, fmt.Appendf(nil, "held flow %d is still on be1", i))
	}
}

// TestXDPLeastTimeAvoidsSlowBackend: with 20 ms added to be2's replies
// to the balancer (its probes' handshake RTT), the xdp least_time VIP
// gives be1 the larger share of its table and new flows mostly go to be1.
func TestXDPLeastTimeAvoidsSlowBackend(t *testing.T) {
	n := newXDPNet(t, 2)
	const delay = 20 * time.Millisecond
	n.DelayFrom(t, n.Backends[1], n.LB.Addr4, delay)
	lb := startLBIn(t, n.LB.NS, n.weightsConf("least_time"))
	lb.waitStatus(t, 10*time.Second, "be2's probe RTT shows the delay", func(st plane.Status) bool {
		return backendOf(st, "w", "be2").RTT >= delay/2 && backendOf(st, "w", "be1").RTT > 0
	})
	waitPreferred(t, lb, "be2", "be1", 4)
	seen := n.newFlowsTo(t, 100)
	if seen["be1"] < 65 {
		t.Errorf("100 new flows, be2 %v slower: %v, want most on be1", delay, seen)
	}
}

// heldConn is an open NamedEcho connection with its reader.
type heldConn struct {
	c *net.TCPConn
	r *bufio.Reader
}
