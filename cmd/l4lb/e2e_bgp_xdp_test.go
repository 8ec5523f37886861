package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/l4lb/l4lb/internal/testutil"
)

// xdpECMPTableSize is the maglev_table_size of both balancers in
// TestBGPECMPXDP. (Giving the second balancer another size is the
// mutation that must break the moved connections.)
const xdpECMPTableSize = 65537

// xdpBGPConfig is balancer i of the ECMP network in xdp mode: XDP on its
// router-facing link x0, the VIP 198.18.2.10:80 balanced by Maglev on the
// 5-tuple over the three backends' port 80, IPIP to them (out of y0, by
// the FIB), announced to the router over BGP.
func xdpBGPConfig(e *testutil.ECMP, i, tableSize int) string {
	c := newConf(`drain_timeout = "1s"`).raw("\n[xdp]\ninterface = \"x0\"\n").raw(bgpTable(e, i, `shutdown_grace = "1s"`)).
		vip("web", fmt.Sprintf("%s:80", bgpVIP), `mode = "xdp"`, `algorithm = "maglev"`, fmt.Sprintf("maglev_table_size = %d", tableSize)).health(bgpProbe...)
	for j := range e.Backends {
		c.at(fmt.Sprintf("be%d", j), fmt.Sprintf("%s:80", e.BackendIP(j)))
	}
	return c.String()
}

// xdpECMP turns the ECMP network (built without VIPs on the balancers'
// lo) into a DSR one: the balancers forward (bpf_fib_lookup needs it) and
// redirect IPIP frames out of y0, whose router-side peers get an XDP_PASS
// program so that native redirects into the veth are delivered; the
// balancer-to-backend links carry a full segment plus the outer header
// (MTU 1600); checksums are computed before frames meet XDP (tx offload
// off on the client and the router's ports); the backends hold the VIP on
// lo, decapsulate with `l4lb decap`, serve a named echo on port 80 and
// answer the client straight through the router.
func xdpECMP(t *testing.T, e *testutil.ECMP) {
	t.Helper()
	bin := mustBin(t)
	testutil.TxChecksumOff(t, e.Client, "c0")
	rtr := []string{"link set br1 mtu 1600"}
	for i, lb := range e.LBs {
		rtr = append(rtr, fmt.Sprintf("link set yl%d mtu 1600", i))
		lb.MustExec(t, "ip", "link", "set", "y0", "mtu", "1600")
		lb.MustExec(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.x0.send_redirects=0")
	}
	for j := range e.Backends {
		rtr = append(rtr, fmt.Sprintf("link set yb%d mtu 1600", j))
	}
	for _, l := range rtr {
		e.Router.MustExec(t, append([]string{"ip"}, strings.Fields(l)...)...)
	}
	// Replies come from the VIP on br1 while the VIP is routed to br0.
	e.Router.MustExec(t, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.br1.rp_filter=0")
	for i := range e.LBs {
		testutil.TxChecksumOff(t, e.Router, fmt.Sprintf("xl%d", i))
		testutil.AttachPassXDP(t, e.Router, fmt.Sprintf("yl%d", i))
	}
	for j, b := range e.Backends {
		b.MustExec(t, "ip", "link", "set", "b0", "mtu", "1600")
		b.MustExec(t, "ip", "addr", "add", host(bgpVIP).String(), "dev", "lo")
		b.MustExec(t, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.b0.rp_filter=0",
			"net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2")
		if out, err := b.Command(bin, "decap", "attach", "--iface", "b0").CombinedOutput(); err != nil {
			t.Fatalf("decap attach on backend %d: %v\n%s", j, err, out)
		}
		var ln net.Listener
		b.MustDo(t, func() (err error) {
			ln, err = net.Listen("tcp4", "0.0.0.0:80")
			return err
		})
		testutil.ServeConns(ln, testutil.NamedEcho(fmt.Sprintf("be%d", j)))
		t.Cleanup(func() { ln.Close() })
	}
}

// ecmpConn is a long-lived connection of the client to the VIP.
type ecmpConn struct {
	port    int
	c       *net.TCPConn
	r       *bufio.Reader
	backend string
}

// exchange sends a fresh random message and wants it back, byte for byte.
func (ec *ecmpConn) exchange(size int) error {
	msg := make([]byte, size)
	rand.Read(msg)
	ec.c.SetDeadline(time.Now().Add(5 * time.Second))
	errc := make(chan error, 1)
	go func() { _, err := ec.c.Write(msg); errc <- err }()
	got := make([]byte, size)
	_, err := io.ReadFull(ec.r, got)
	if werr := <-errc; err == nil {
		err = werr
	}
	if err == nil && !bytes.Equal(got, msg) {
		err = fmt.Errorf("the echo of %d bytes came back different", size)
	}
	if err != nil {
		return fmt.Errorf("connection from port %d (backend %s): %w", ec.port, ec.backend, err)
	}
	return nil
}

// TestBGPECMPXDP: two balancers in xdp mode (Maglev on the 5-tuple, DSR)
// announce the same VIP; the router spreads long-lived TCP connections
// over both; kill -9 of one closes its BGP session, the router sends its
// flows to the other, which has no conntrack entry for them and takes the
// Maglev choice: the same backend, so every connection goes on (same
// byte stream, no reset). The survivor's new_flows counter grows by the
// number of connections the dead one carried: they went through it.
func TestBGPECMPXDP(t *testing.T) {
	testutil.RequirePriv(t, "network namespaces, BIRD, XDP")
	e := testutil.NewECMP(t, 2, 3) // no VIP on the balancers: what XDP passes up goes nowhere
	xdpECMP(t, e)
	rtr := e.StartRouter(t, 65001, 9)
	lbs := []*lbProcess{
		startLBIn(t, e.LBs[0], xdpBGPConfig(e, 0, xdpECMPTableSize)),
		startLBIn(t, e.LBs[1], xdpBGPConfig(e, 1, xdpECMPTableSize)),
	}
	rtr.WaitNextHops(t, host(bgpVIP), 15*time.Second, e.LBAddr(0), e.LBAddr(1))

	const conns, size = 16, 8 << 10
	var cs []*ecmpConn
	t.Cleanup(func() {
		for _, ec := range cs {
			ec.c.Close()
		}
	})
	for k := range conns {
		port := 21000 + k
		var ec *ecmpConn
		// The first SYNs may meet a backend neighbour the balancer has
		// not resolved yet (drop_no_neigh): retry the first dial a while.
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := dialXDP(e, port)
			if err == nil {
				ec = c
				break
			}
			if k > 0 || time.Now().After(deadline) {
				t.Fatalf("connection from port %d: %v", port, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cs = append(cs, ec)
		if err := ec.exchange(size); err != nil {
			t.Fatal(err)
		}
	}
	var flows [2]uint64
	for i, lb := range lbs {
		v := lb.vip(t, "web")
		if v.XDP == nil {
			t.Fatalf("balancer %d: no xdp counters for web", i)
		}
		flows[i] = v.XDP.NewFlows
	}
	perBackend := map[string]int{}
	for _, ec := range cs {
		perBackend[ec.backend]++
	}
	t.Logf("%d connections: per balancer %v, per backend %v", conns, flows, perBackend)
	if flows[0] == 0 || flows[1] == 0 || flows[0]+flows[1] < conns {
		t.Fatalf("new flows per balancer %v: want both used, %d in all (a retried first dial may add one)", flows, conns)
	}

	before := lbs[1].vip(t, "web")
	lbs[0].cmd.Process.Kill()
	select {
	case <-lbs[0].exited:
	case <-time.After(5 * time.Second):
		t.Fatal("balancer 0 did not exit after SIGKILL")
	}
	d := rtr.WaitNextHops(t, host(bgpVIP), 5*time.Second, e.LBAddr(1))
	t.Logf("kill -9 of balancer 0: its path gone from the router after %v", d)
	// Its XDP program went with it (a bpf_link, not pinned): the router's
	// move is what keeps the flows alive, not a program left forwarding.
	e.LBs[0].MustDo(t, func() error {
		l, err := netlink.LinkByName("x0")
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return fmt.Errorf("an XDP program (id %d) is still attached to the dead balancer's x0", x.ProgId)
		}
		return nil
	})

	// All at once: a broken connection costs its 5s deadline once.
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for k, ec := range cs {
		wg.Go(func() { errs[k] = ec.exchange(size) })
	}
	wg.Wait()
	broken := 0
	for _, err := range errs {
		if err != nil {
			t.Errorf("after balancer 0 died: %v", err)
			broken++
		}
	}
	if broken > 0 {
		t.Fatalf("%d of %d connections broke when balancer 0 died", broken, conns)
	}
	after := lbs[1].vip(t, "web")
	moved := after.XDP.NewFlows - before.XDP.NewFlows
	t.Logf("all %d connections continued; balancer 1 took over %d of them (balancer 0 carried %d)", conns, moved, flows[0])
	if moved < flows[0] || moved > uint64(conns) {
		t.Fatalf("balancer 1 pinned %d new flows after the failover, want the %d balancer 0 carried", moved, flows[0])
	}
}

// dialXDP connects from the client's port to the VIP and reads the
// backend's name.
func dialXDP(e *testutil.ECMP, port int) (*ecmpConn, error) {
	var c net.Conn
	err := e.Client.Do(func() (err error) {
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: e.ClientIP.AsSlice(), Port: port}}
		c, err = d.Dial("tcp4", netip.AddrPortFrom(bgpVIP, 80).String())
		return err
	})
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	_ = tc.SetLinger(0)
	tc.SetDeadline(time.Now().Add(3 * time.Second))
	r := bufio.NewReader(tc)
	name, err := r.ReadString('\n')
	if err != nil {
		tc.Close()
		return nil, fmt.Errorf("reading the backend's name: %w", err)
	}
	return &ecmpConn{port: port, c: tc, r: r, backend: strings.TrimSpace(name)}, nil
}
