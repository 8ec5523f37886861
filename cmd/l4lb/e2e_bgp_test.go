package main

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

var (
	bgpVIP  = netip.MustParseAddr("198.18.2.10")
	bgpVIP2 = netip.MustParseAddr("198.18.2.20")
)

// bgpConfig is a balancer that peers with the ECMP router and serves vip
// on port 80 from the three backends' port 7000 with Maglev on the
// client's address and port: every balancer picks the same backend for a
// flow.
func bgpConfig(e *testutil.ECMP, i int, vip netip.Addr, drain string) string {
	return newConf(fmt.Sprintf("drain_timeout = %q", drain)).raw(bgpTable(e, i, `communities = ["65001:100"]`, `shutdown_grace = "2s"`)).
		vip("web", fmt.Sprintf("%s:80", vip), `algorithm = "maglev"`, `hash_key = "src_ip_port"`).health(bgpProbe...).backends(3, 7000).String()
}

// bgpTable is balancer i's [bgp] table, with more keys, peering with the
// ECMP router.
func bgpTable(e *testutil.ECMP, i int, keys ...string) string {
	return fmt.Sprintf("\n[bgp]\nasn = 65001\nrouter_id = %q\n%s\n  [[bgp.peer]]\n  address = %q\n  asn = 65000\n", e.LBAddr(i), strings.Join(keys, "\n"), e.RouterID)
}

// bgpProbe is the health check of the BGP tests' VIPs: quick, so that a
// backend's fall reaches the announcement soon.
var bgpProbe = []string{`type = "tcp"`, `interval = "200ms"`, `timeout = "200ms"`, `fall = 2`, `rise = 1`}

// backendSet runs the named echo servers on the backends; stop and start
// take them all down and up again.
type backendSet struct {
	e   *testutil.ECMP
	mu  sync.Mutex
	lns []net.Listener
}

func startBackendSet(t *testing.T, e *testutil.ECMP) *backendSet {
	bs := &backendSet{e: e}
	bs.start(t)
	t.Cleanup(bs.stop)
	return bs
}

func (bs *backendSet) start(t *testing.T) {
	t.Helper()
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for j, ns := range bs.e.Backends {
		var ln net.Listener
		ns.MustDo(t, func() (err error) {
			ln, err = net.Listen("tcp4", fmt.Sprintf("%s:7000", bs.e.BackendIP(j)))
			return err
		})
		testutil.ServeConns(ln, testutil.NamedEcho(fmt.Sprintf("be%d", j)))
		bs.lns = append(bs.lns, ln)
	}
}

func (bs *backendSet) stop() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, ln := range bs.lns {
		ln.Close()
	}
	bs.lns = nil
}

// dialFrom connects from the client's srcPort (0: any) to vip:80 and
// returns the connection and the backend's name. Close with linger 0
// (an RST): the 4-tuple leaves no TIME_WAIT and can be dialed again.
func dialFrom(e *testutil.ECMP, vip netip.Addr, srcPort int) (*net.TCPConn, string, error) {
	var c net.Conn
	err := e.Client.Do(func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: e.ClientIP.AsSlice(), Port: srcPort}}
		c, err = d.Dial("tcp4", netip.AddrPortFrom(vip, 80).String())
		return err
	})
	if err != nil {
		return nil, "", err
	}
	tc := c.(*net.TCPConn)
	_ = tc.SetLinger(0)
	tc.SetDeadline(time.Now().Add(3 * time.Second))
	name, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil {
		tc.Close()
		return nil, "", fmt.Errorf("reading the backend's name: %w", err)
	}
	tc.SetDeadline(time.Time{})
	return tc, strings.TrimSpace(name), nil
}

func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, 32) }

// TestBGPAnnounceLifecycle: a balancer announces its VIP while a backend
// is up, withdraws it when every backend is down and announces it again
// when they return; a reload that removes the VIP withdraws it; SIGTERM
// withdraws before the drain (the route is gone while the process still
// drains a connection) and the process exits after.
func TestBGPAnnounceLifecycle(t *testing.T) {
	testutil.RequirePriv(t, "network namespaces, BIRD")
	e := testutil.NewECMP(t, 1, 3, bgpVIP, bgpVIP2)
	rtr := e.StartRouter(t, 65001, 9)
	bs := startBackendSet(t, e)
	lb := startLBIn(t, e.LBs[0], bgpConfig(e, 0, bgpVIP, "30s"))
	lbA := e.LBAddr(0)

	d := rtr.WaitNextHops(t, host(bgpVIP), 15*time.Second, lbA)
	t.Logf("announced %v after start", d)
	if c, name, err := dialFrom(e, bgpVIP, 0); err != nil {
		t.Fatalf("through the router: %v", err)
	} else {
		c.Close()
		t.Logf("served by %s", name)
	}
	st := lb.status(t)
	if st.BGP == nil || len(st.BGP.Peers) != 1 || !st.BGP.Peers[0].Up || st.BGP.Peers[0].PrefixesSent != 1 || len(st.BGP.Announced) != 1 {
		t.Fatalf("status bgp: %+v", st.BGP)
	}
	text := lb.statusText(t)
	for _, want := range []string{"bgp: as 65001, router id 198.18.3.10, announced: 198.18.2.10/32", "peer 198.18.3.1 as 65000  established for", "prefixes sent 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("l4lb status does not show %q:\n%s", want, text)
		}
	}
	if out := rtr.Show(t, "show", "route", "all", host(bgpVIP).String()); !strings.Contains(out, "(65001,100)") {
		t.Errorf("community 65001:100 not on the route:\n%s", out)
	}

	bs.stop()
	d = rtr.WaitNextHops(t, host(bgpVIP), 10*time.Second)
	t.Logf("withdrawn %v after every backend went away", d)
	bs.start(t)
	d = rtr.WaitNextHops(t, host(bgpVIP), 10*time.Second, lbA)
	t.Logf("announced again %v after the backends came back", d)

	// A reload replaces the VIP with another on a new address.
	lb.writeConfig(t, strings.ReplaceAll(bgpConfig(e, 0, bgpVIP2, "4s"), "@ADMIN@", lb.sock))
	lb.signal(t, syscall.SIGHUP)
	rtr.WaitNextHops(t, host(bgpVIP), 10*time.Second)
	rtr.WaitNextHops(t, host(bgpVIP2), 10*time.Second, lbA)

	// SIGTERM with a connection open: withdraw, grace, then the drain
	// waits for the connection until drain_timeout (4s): with one
	// balancer and its route withdrawn the client's packets have no
	// path any more, so the connection can only time out. (With ECMP the
	// router moves it to another balancer.)
	c, _, err := dialFrom(e, bgpVIP2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lb.signal(t, syscall.SIGTERM)
	d = rtr.WaitNextHops(t, host(bgpVIP2), 5*time.Second)
	if lb.hasExited() {
		t.Fatalf("l4lb exited before its route was withdrawn")
	}
	t.Logf("withdrawn %v after SIGTERM, process still draining", d)
	if st := lb.status(t); len(st.VIPs) != 1 || st.VIPs[0].Active != 1 || st.BGP == nil || !st.BGP.Withdrawn || len(st.BGP.Announced) != 0 {
		t.Fatalf("after the withdraw, want the connection still held and nothing announced: active %+v, bgp %+v", st.VIPs, st.BGP)
	}
	log := lb.log.String()
	if w, s := strings.Index(log, "bgp routes withdrawn"), strings.Index(log, "stopped"); w < 0 || (s >= 0 && s < w) {
		t.Fatalf("withdraw not logged before the drain ended (withdrawn at %d, stopped at %d)", w, s)
	}
	select {
	case <-lb.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("l4lb did not exit after shutdown_grace and drain_timeout")
	}
}

// TestBGPECMPTwoBalancers: two balancers announce the same VIP; the
// router spreads flows over both; every flow reaches the same backend
// whichever balancer takes it (identical Maglev tables); kill -9 of one
// takes its path out at once (its BGP session closes with the process)
// and its flows go to the other, to the same backends. Then the link of
// the other goes dark: the router drops it only when the hold timer
// expires (no BFD), which the test measures.
func TestBGPECMPTwoBalancers(t *testing.T) {
	testutil.RequirePriv(t, "network namespaces, BIRD")
	e := testutil.NewECMP(t, 2, 3, bgpVIP)
	rtr := e.StartRouter(t, 65001, 9)
	startBackendSet(t, e)
	lbs := []*lbProcess{startLBIn(t, e.LBs[0], bgpConfig(e, 0, bgpVIP, "1s")), startLBIn(t, e.LBs[1], bgpConfig(e, 1, bgpVIP, "1s"))}
	rtr.WaitNextHops(t, host(bgpVIP), 15*time.Second, e.LBAddr(0), e.LBAddr(1))

	const flows = 60
	picked := map[int]string{}
	for k := range flows {
		port := 20000 + k
		c, name, err := dialFrom(e, bgpVIP, port)
		if err != nil {
			t.Fatalf("flow from port %d: %v", port, err)
		}
		c.Close()
		picked[port] = name
	}
	var per [2]uint64
	for i, lb := range lbs {
		per[i] = lb.status(t).VIPs[0].Accepted
	}
	t.Logf("flows per balancer: %v", per)
	if per[0] == 0 || per[1] == 0 || per[0]+per[1] != flows {
		t.Fatalf("flows per balancer %v, want both used and %d in all", per, flows)
	}

	lbs[0].cmd.Process.Kill()
	d := rtr.WaitNextHops(t, host(bgpVIP), 5*time.Second, e.LBAddr(1))
	t.Logf("kill -9 of balancer 0: its path gone from the router after %v", d)
	for port, want := range picked {
		c, name, err := dialFrom(e, bgpVIP, port)
		if err != nil {
			t.Fatalf("flow from port %d after balancer 0 died: %v", port, err)
		}
		c.Close()
		if name != want {
			t.Errorf("flow from port %d: backend %s after the failover, %s before", port, name, want)
		}
	}
	if got := lbs[1].status(t).VIPs[0].Accepted; got != per[1]+flows {
		t.Errorf("balancer 1 accepted %d, want %d", got, per[1]+flows)
	}

	// Ungraceful and silent: the balancer's link goes down inside its
	// namespace; its process and session live on, unheard.
	start := time.Now()
	e.LBs[1].MustExec(t, "ip", "link", "set", "x0", "down")
	rtr.WaitNextHops(t, host(bgpVIP), 15*time.Second)
	d = time.Since(start)
	t.Logf("silent death of balancer 1: the router withdrew its path after %v (hold time 9s)", d)
	if d > 11*time.Second {
		t.Errorf("detection took %v, more than the 9s hold time", d)
	}
}
