package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// bfdMult is the detect multiplier of the BFD tests, both ends; the
// interval is bfdIntervalOf's. The router must drop a dead balancer
// within interval x bfdMult plus the 100 ms the issue allows for BIRD's
// reaction and the kernel.
const bfdMult = 3

// bfdIntervalOf is the sessions' interval: L4LB_BFD_INTERVAL (a Go
// duration, for long runs at other rates), else the 100ms.
func bfdIntervalOf(t *testing.T) time.Duration {
	v := os.Getenv("L4LB_BFD_INTERVAL")
	if v == "" {
		return 100 * time.Millisecond
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 10*time.Millisecond {
		t.Fatalf("L4LB_BFD_INTERVAL=%q: want a duration of 10ms or more", v)
	}
	return d
}

// bfdSoak is how long TestBGPBFD watches a fault-free pair of sessions
// for a flap: L4LB_BFD_SOAK (a Go duration; "10m" for the long
// run), else 5s.
func bfdSoak(t *testing.T) time.Duration {
	v := os.Getenv("L4LB_BFD_SOAK")
	if v == "" {
		return 5 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("L4LB_BFD_SOAK=%q: %v", v, err)
	}
	return d
}

// bfdConfig is bgpConfig with a BFD session to the router and metrics on
// the balancer's own address.
func bfdConfig(e *testutil.ECMP, i int, bfd bool, interval time.Duration) string {
	peer := ""
	if bfd {
		peer = fmt.Sprintf("  bfd = { interval = %q, multiplier = %d }\n", interval, bfdMult)
	}
	return newConf(`drain_timeout = "1s"`, fmt.Sprintf("metrics_listen = %q", netip.AddrPortFrom(e.LBAddr(i), 9370))).
		raw(bgpTable(e, i, `shutdown_grace = "1s"`)+peer).
		vip("web", fmt.Sprintf("%s:80", bgpVIP), `algorithm = "maglev"`, `hash_key = "src_ip_port"`).health(bgpProbe...).backends(3, 7000).String()
}

// peerBFD is the BFD status of a balancer's only peer.
func peerBFD(t *testing.T, lb *lbProcess) *plane.BFDStatus {
	t.Helper()
	st := lb.status(t)
	if st.BGP == nil || len(st.BGP.Peers) != 1 {
		t.Fatalf("status bgp: %+v", st.BGP)
	}
	return st.BGP.Peers[0].BFD
}

// birdBFDSessions is `birdc show bfd sessions`: neighbour -> its line
// (state and since).
func birdBFDSessions(t *testing.T, rtr *testutil.Bird) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(rtr.Show(t, "show", "bfd", "sessions"), "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && strings.HasPrefix(f[0], "198.18.") {
			out[f[0]] = strings.Join(f[1:], " ")
		}
	}
	return out
}

// sameBFDSessions reports whether BIRD shows the same sessions in the same
// states since the same moment. BIRD prints a session's "since" from its
// monotonic clock converted to wall time at each `show`, so the same
// moment can print a millisecond apart; a flap moves it by seconds (the
// detection time, then the slow start to Up).
func sameBFDSessions(before, after map[string]string) bool {
	if len(before) != len(after) {
		return false
	}
	for peer, b := range before {
		bf, af := strings.Fields(b), strings.Fields(after[peer])
		if len(bf) != len(af) || len(bf) < 3 {
			return false
		}
		for i := range bf {
			if i == 2 { // the since time
				t0, err0 := time.Parse("15:04:05.000", bf[i])
				t1, err1 := time.Parse("15:04:05.000", af[i])
				if err0 != nil || err1 != nil || t1.Sub(t0).Abs() > 50*time.Millisecond {
					return false
				}
			} else if bf[i] != af[i] {
				return false
			}
		}
	}
	return true
}

// TestBGPBFD: two balancers with BFD (100ms x 3) beside their BGP
// sessions to BIRD (bfd on). Both sessions come up (BIRD, status and
// metrics show them); nothing flaps over a fault-free run (L4LB_BFD_SOAK);
// kill -9 of one balancer and then the silent death of the other (its
// link set down on the router's side: its process and TCP session live
// on) each take the path out of the router's kernel table within
// 3 x 100ms + 100ms; the silent balancer's own BFD session goes down
// with "detection-time-expired" and it resets its BGP session; when the
// link comes back, so do BFD, BGP and the path.
func TestBGPBFD(t *testing.T) {
	testutil.RequirePriv(t, "network namespaces, BIRD")
	bfdInterval := bfdIntervalOf(t)
	bfdBound := bfdMult*bfdInterval + 100*time.Millisecond
	e := testutil.NewECMP(t, 2, 3, bgpVIP)
	rtr := e.StartRouterBFD(t, 65001, 9, bfdInterval, bfdMult)
	routes := testutil.WatchRoutes(t, e.Router)
	startBackendSet(t, e)
	lbs := []*lbProcess{startLBIn(t, e.LBs[0], bfdConfig(e, 0, true, bfdInterval)), startLBIn(t, e.LBs[1], bfdConfig(e, 1, true, bfdInterval))}
	routes.WaitNextHops(t, host(bgpVIP), time.Now(), 20*time.Second, e.LBAddr(0), e.LBAddr(1))

	testutil.Eventually(t, 10*time.Second, "both BFD sessions up at both ends", func() bool {
		s := birdBFDSessions(t, rtr)
		for i, lb := range lbs {
			if b := peerBFD(t, lb); b == nil || b.State != "up" || !strings.HasPrefix(s[e.LBAddr(i).String()], "br0 Up") {
				return false
			}
		}
		return true
	})
	before := birdBFDSessions(t, rtr)
	t.Logf("router: %v", before)
	for i, lb := range lbs {
		b := peerBFD(t, lb)
		if b.Interval != bfdInterval || b.Multiplier != bfdMult || b.DetectTime != bfdMult*bfdInterval || b.TxInterval != bfdInterval || b.RemoteState != "up" || b.RemoteDiscr == 0 {
			t.Fatalf("balancer %d: bfd status %+v", i, b)
		}
		text := lb.statusText(t)
		if !strings.Contains(text, fmt.Sprintf("bfd up (remote up)  %v x %d, detect %v", bfdInterval, bfdMult, bfdMult*bfdInterval)) {
			t.Errorf("balancer %d: l4lb status shows no bfd line:\n%s", i, text)
		}
		m := scrape(t, e.LBs[i], netip.AddrPortFrom(e.LBAddr(i), 9370), "/metrics")
		for _, want := range []string{`l4lb_bfd_session_up{peer="198.18.3.1"} 1`, `l4lb_bfd_session_state{peer="198.18.3.1"} 3`, `l4lb_bfd_session_downs_total{peer="198.18.3.1"} 0`, `l4lb_bfd_packets_dropped_total{reason="ttl"} 0`} {
			if !strings.Contains(m, want) {
				t.Errorf("balancer %d: metrics lack %s", i, want)
			}
		}
	}

	// Fault-free: both paths stay in the router's table all along, and
	// neither end saw its session leave up.
	soak := bfdSoak(t)
	for end := time.Now().Add(soak); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got := routes.NextHops(t, host(bgpVIP)); len(got) != 2 {
			for i, lb := range lbs {
				t.Logf("balancer %d: bfd %+v", i, peerBFD(t, lb))
			}
			t.Fatalf("a path left the router during the fault-free run: %v\n%s", got, rtr.Show(t, "show", "bfd", "sessions"))
		}
	}
	for i, lb := range lbs {
		b := peerBFD(t, lb)
		t.Logf("balancer %d: longest gap between two BFD packets sent while up: %v", i, b.MaxTxGap)
		if b.State != "up" || b.Ups != 1 || b.Downs != 0 {
			t.Fatalf("balancer %d flapped over %v: %+v", i, soak, b)
		}
	}
	if after := birdBFDSessions(t, rtr); !sameBFDSessions(before, after) {
		t.Fatalf("the router's BFD sessions changed over %v:\nbefore %v\nafter  %v", soak, before, after)
	}
	t.Logf("no flap in %v", soak)

	// kill -9 of balancer 0.
	start := time.Now()
	lbs[0].cmd.Process.Kill()
	d := routes.WaitNextHops(t, host(bgpVIP), start, 5*time.Second, e.LBAddr(1))
	t.Logf("kill -9 of balancer 0: its path gone from the router after %v", d)
	if d > bfdBound {
		t.Errorf("kill -9: path removed after %v, want within %v", d, bfdBound)
	}

	// Silent death of balancer 1: the router's side of its link goes
	// down; the balancer, its process and its TCP session live on.
	start = time.Now()
	e.Router.MustExec(t, "ip", "link", "set", "xl1", "down")
	d = routes.WaitNextHops(t, host(bgpVIP), start, 15*time.Second)
	t.Logf("silent death of balancer 1: its path gone from the router after %v", d)
	if d > bfdBound {
		t.Errorf("silent death: path removed after %v, want within %v (without BFD: the 9s hold time)", d, bfdBound)
	}
	if s := birdBFDSessions(t, rtr)[e.LBAddr(1).String()]; !strings.HasPrefix(s, "br0 Down") {
		t.Errorf("router's BFD session with balancer 1: %q, want Down", s)
	}
	testutil.Eventually(t, 5*time.Second, "balancer 1 sees its BFD session fail and resets BGP", func() bool {
		b := peerBFD(t, lbs[1])
		return b.State == "down" && b.Downs == 1 && b.Diag == "detection-time-expired" && b.BGPResets == 1
	})
	if log := lbs[1].log.String(); !strings.Contains(log, "bfd session failed: resetting the bgp session") {
		t.Errorf("balancer 1 did not log the reset")
	}

	// The link comes back: BFD, then BGP (after BIRD's error wait of 1s
	// and l4lb's connect_retry), then the path.
	start = time.Now()
	e.Router.MustExec(t, "ip", "link", "set", "xl1", "up")
	d = routes.WaitNextHops(t, host(bgpVIP), start, 20*time.Second, e.LBAddr(1))
	t.Logf("link back: path of balancer 1 in the router again after %v", d)
	// (BIRD may replace its BFD session when its BGP protocol restarts:
	// one more down and up on the way.)
	testutil.Eventually(t, 10*time.Second, "balancer 1's BFD session up again", func() bool {
		b := peerBFD(t, lbs[1])
		return b.State == "up" && b.Ups >= 2
	})
}
