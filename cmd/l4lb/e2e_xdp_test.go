// End to end in the one-arm direct-server-return shape of an edge host:
// client -> l4lb (XDP on its only veth) -> backends (decap, VIP on lo) ->
// straight back to the client.

package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

// xdpNet is a DSR network with backends serving the VIPs on port 80 (TCP
// and UDP named echo), a health listener on port 8080 of every address
// (probes of xdp VIPs come to the VIP, others to the backend's own), and
// the decap program attached by `l4lb decap attach`.
type xdpNet struct {
	*testutil.DSR
	vip4, vip6 netip.AddrPort
}

func newXDPNet(t testing.TB, backends int) *xdpNet {
	t.Helper()
	testutil.RequirePriv(t, "XDP programs and network namespaces")
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: backends, IPv6: true})
	vips := d.ServeVIPs(t, 80)
	bin := mustBin(t)
	for _, b := range d.Backends {
		d.ServeTCP(t, b, netip.AddrPortFrom(netip.IPv4Unspecified(), 8080), testutil.NamedEcho(b.Name))
		if out, err := b.NS.Command(bin, "decap", "attach", "--iface", b.Link).CombinedOutput(); err != nil {
			t.Fatalf("decap attach on %s: %v\n%s", b.Name, err, out)
		}
	}
	return &xdpNet{DSR: d, vip4: vips[0], vip6: vips[1]}
}

// xdpProbe is the xdp VIPs' health check: a TCP connect to the
// backends' port 8080.
var xdpProbe = []string{`type = "tcp"`, `port = 8080`, `interval = "300ms"`, `timeout = "300ms"`}

// xdpTable is the [xdp] table on the balancer's link, with more lines.
func (n *xdpNet) xdpTable(more string) string {
	return fmt.Sprintf("[xdp]\ninterface = %q\n%s\n", n.LB.Link, more)
}

// xdpConf is an l4lb config with global's keys, [xdp] (with the lines
// xdp) and the xdp VIPs web4, web6 (tcp) and dns4 (udp) on port 80 over
// the backends given; more VIPs may follow. web4's and dns4's check is
// xdpProbe, down at its first failure.
func (n *xdpNet) xdpConf(global []string, xdp string, backends ...int) *conf {
	return n.xdpConfProbe(global, xdp, append(xdpProbe[:len(xdpProbe):len(xdpProbe)], `fall = 1`), backends...)
}

// xdpConfProbe is xdpConf with probe as web4's and dns4's check.
func (n *xdpNet) xdpConfProbe(global []string, xdp string, probe []string, backends ...int) *conf {
	c := newConf(append([]string{`drain_timeout = "2s"`}, global...)...).raw(n.xdpTable(xdp))
	c.vip("web4", n.vip4.String(), `mode = "xdp"`).health(probe...)
	n.backendsOn(c, 80, false, backends...)
	c.vip("dns4", n.vip4.String(), `protocol = "udp"`, `mode = "xdp"`).health(probe...)
	n.backendsOn(c, 80, false, backends...)
	c.vip("web6", n.vip6.String(), `mode = "xdp"`).health(`type = "none"`)
	return n.backendsOn(c, 80, true, backends...)
}

// backendsOn adds the backends is, by name, on port, at their IPv6
// addresses when v6.
func (n *xdpNet) backendsOn(c *conf, port uint16, v6 bool, is ...int) *conf {
	for _, i := range is {
		be := n.Backends[i]
		addr := be.Addr4
		if v6 {
			addr = be.Addr6
		}
		c.at(be.Name, netip.AddrPortFrom(addr, port))
	}
	return c
}

// config is xdpConf with the lines extraXDP in [xdp] and extra appended.
func (n *xdpNet) config(extraXDP, extra string, backends ...int) string {
	return n.xdpConf(nil, extraXDP, backends...).raw(extra).String()
}

// askTCPConn opens a connection to vip and returns it with the name of
// the backend that answered.
func (n *xdpNet) askTCPConn(t *testing.T, vip netip.AddrPort) (*net.TCPConn, *bufio.Reader, string) {
	t.Helper()
	c := n.DialTCP(t, vip)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: greeting: %v", vip, err)
	}
	return c, r, strings.TrimSpace(name)
}

// echo sends msg on an open NamedEcho connection and wants it back.
func echo(t *testing.T, c net.Conn, r *bufio.Reader, msg []byte) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	errc := make(chan error, 1)
	go func() { _, err := c.Write(msg); errc <- err }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("echo of %d bytes: %v", len(msg), err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo of %d bytes came back different", len(msg))
	}
}

// TestXDPDirectServerReturn: TCP flows spread over the backends per
// Maglev, a 1 MiB echo comes back intact, UDP and IPv6 work, the replies
// never cross the balancer, a proxy VIP works beside the xdp ones, and
// status counts the packets.
func TestXDPDirectServerReturn(t *testing.T) {
	n := newXDPNet(t, 3)
	metricsAddr := netip.AddrPortFrom(n.LB.Addr4, 9370)
	cfg := n.xdpConf([]string{fmt.Sprintf("metrics_listen = %q", metricsAddr)}, "", 0, 1, 2).
		vip("proxy", netip.AddrPortFrom(n.LB.Addr4, 8080).String()).at("", netip.AddrPortFrom(n.Backends[0].Addr4, 8080))
	lb := startLBIn(t, n.LB.NS, cfg.String())

	seen := map[string]int{}
	for range 30 {
		seen[n.AskTCP(t, n.vip4)]++
	}
	if len(seen) < 2 || seen["be1"]+seen["be2"]+seen["be3"] != 30 {
		t.Fatalf("30 connections spread %v", seen)
	}
	if name := n.AskUDP(t, n.vip4); !strings.HasPrefix(name, "be") {
		t.Fatalf("udp answered by %q", name)
	}
	if name := n.AskTCP(t, n.vip6); !strings.HasPrefix(name, "be") {
		t.Fatalf("ipv6 answered by %q", name)
	}
	if name := n.AskTCP(t, netip.AddrPortFrom(n.LB.Addr4, 8080)); name != "be1" {
		t.Fatalf("proxy VIP beside the xdp ones answered by %q", name)
	}

	// 1 MiB each way; the lb sees the client's packets only.
	c, r, _ := n.askTCPConn(t, n.vip4)
	lbRx0, _ := n.Packets(t, n.LB)
	cliRx0, cliTx0 := n.Packets(t, n.Client)
	msg := make([]byte, 1<<20)
	rand.Read(msg)
	echo(t, c, r, msg)
	lbRx1, _ := n.Packets(t, n.LB)
	cliRx1, cliTx1 := n.Packets(t, n.Client)
	if got, sent, back := lbRx1-lbRx0, cliTx1-cliTx0, cliRx1-cliRx0; got > sent+sent/4 || back < 500 {
		t.Fatalf("during 1 MiB each way: lb received %d packets, client sent %d and received %d (replies must bypass the lb)", got, sent, back)
	}

	st := lb.status(t)
	web := mustVIP(t, st, "web4")
	if web.XDP == nil || web.XDP.Packets < 100 || web.XDP.NewFlows < 30 || web.XDP.Drops != 0 {
		t.Fatalf("web4 xdp counters: %+v", web.XDP)
	}
	var perBackend uint64
	for _, b := range web.Backends {
		perBackend += b.Packets
	}
	if perBackend != web.XDP.Packets || st.XDP == nil || st.XDP.Interface != n.LB.Link || st.XDP.Counters["tx"] == 0 {
		t.Fatalf("backend packets %d vs VIP %d; xdp %+v", perBackend, web.XDP.Packets, st.XDP)
	}
	metrics := scrape(t, n.LB.NS, metricsAddr, "/metrics")
	for _, want := range []string{`l4lb_vip_xdp_packets_total{protocol="tcp",vip="web4"} `, `l4lb_xdp_events_total{event="tx"} `, `l4lb_backend_packets_total{address=`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// scrape GETs path from addr inside ns. (net/http dials on a goroutine of
// its own, outside the namespace: the connection is made here instead.)
func scrape(t *testing.T, ns *testutil.Netns, addr netip.AddrPort, path string) string {
	t.Helper()
	var c net.Conn
	ns.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp", addr.String(), 2*time.Second)
		return err
	})
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v: %.2000s", path, resp.Status, err, body)
	}
	return string(body)
}

// TestXDPReloadKeepsEstablishedFlows: a reload that removes a backend
// keeps the established connection on it, while new flows avoid it.
func TestXDPReloadKeepsEstablishedFlows(t *testing.T) {
	n := newXDPNet(t, 3)
	lb := startLBIn(t, n.LB.NS, n.config("", "", 0, 1, 2))
	c, r, victim := n.askTCPConn(t, n.vip4)
	echo(t, c, r, []byte("before"))
	keep := []int{}
	for i, b := range n.Backends {
		if b.Name != victim {
			keep = append(keep, i)
		}
	}
	cfg := strings.ReplaceAll(n.config("", "", keep...), "@ADMIN@", lb.sock)
	lb.writeConfig(t, cfg)
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	echo(t, c, r, []byte("after the reload removed my backend"))
	for range 20 {
		if name := n.AskTCP(t, n.vip4); name == victim {
			t.Fatalf("a new flow went to %s, removed by the reload", victim)
		}
	}
	web := lb.vip(t, "web4")
	for _, b := range web.Backends {
		if b.ID == victim && b.LiveFlows != 1 {
			t.Fatalf("removed backend %s: %+v", victim, b)
		}
	}
}

// TestXDPDownBackendFlowsPurged: a UDP flow pinned to a backend whose
// health check fails moves to another backend at its next datagram.
func TestXDPDownBackendFlowsPurged(t *testing.T) {
	n := newXDPNet(t, 2)
	lb := startLBIn(t, n.LB.NS, n.config("", "", 0, 1))
	c := n.DialUDP(t, n.vip4) // one 5-tuple for the whole test
	ask := func() string {
		t.Helper()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("q")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 256)
		k, err := c.Read(buf)
		if err != nil {
			t.Fatalf("udp reply: %v", err)
		}
		name, _, _ := bytes.Cut(buf[:k], []byte("\n"))
		return string(name)
	}
	first := ask()
	if again := ask(); again != first {
		t.Fatalf("one flow answered by %s then %s", first, again)
	}
	var victim *testutil.DSRHost
	for _, b := range n.Backends {
		if b.Name == first {
			victim = b
		}
	}
	// Take the victim's health listener away (iptables would do; closing
	// its port with a firewall-free trick: an nft-free reject by a route).
	victim.NS.MustExec(t, "ip", "route", "add", "prohibit", n.LB.Addr4.String()+"/32")
	testutil.Eventually(t, 5*time.Second, "the victim to go down", func() bool {
		v := lb.vip(t, "dns4")
		for _, b := range v.Backends {
			if b.ID == victim.Name {
				return b.Health == "down"
			}
		}
		return false
	})
	deadline := time.Now().Add(5 * time.Second)
	for ask() == victim.Name {
		if time.Now().After(deadline) {
			t.Fatalf("the udp flow still goes to %s, down", victim.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mountBPF mounts a bpffs on a fresh directory of the test's (in this
// mount namespace, so that `ip netns exec` children see it and pins
// outlive them) and unmounts it at cleanup.
func mountBPF(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Fatalf("mount bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestXDPRestartKeepsConnection: with pin_path, a connection established
// through one l4lb survives its exit and a new l4lb's start, which adopts
// the maps; new flows work after the restart.
func TestXDPRestartKeepsConnection(t *testing.T) {
	n := newXDPNet(t, 3)
	pins := mountBPF(t)
	cfg := n.config(fmt.Sprintf("pin_path = %q", pins), "", 0, 1, 2)
	lb := startLBIn(t, n.LB.NS, cfg)
	c, r, first := n.askTCPConn(t, n.vip4)
	echo(t, c, r, []byte("before the restart"))
	lb.signal(t, syscall.SIGTERM)
	select {
	case <-lb.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("l4lb did not exit")
	}
	lb.waitLog(t, "xdp program left attached")
	echo(t, c, r, []byte("while no l4lb runs: the pinned program forwards"))

	// Backends in another order: without adopting the old indexes, the
	// new l4lb would number them differently and the connection would
	// land on another backend.
	lb2 := startLBIn(t, n.LB.NS, n.config(fmt.Sprintf("pin_path = %q", pins), "", 2, 1, 0))
	lb2.waitLog(t, "adopted the maps pinned by an earlier l4lb")
	echo(t, c, r, []byte("after the restart, on "+first))
	if name := n.AskTCP(t, n.vip4); !strings.HasPrefix(name, "be") {
		t.Fatalf("new flow after the restart: %q", name)
	}

	// For good: stop, then take the program off.
	lb2.signal(t, syscall.SIGTERM)
	<-lb2.exited
	if out, err := n.LB.NS.Command(mustBin(t), "xdp", "detach", lb2.cfg).CombinedOutput(); err != nil {
		t.Fatalf("xdp detach: %v\n%s", err, out)
	}
	if _, err := tryAsk(n.DSR, n.vip4); err == nil {
		t.Fatal("the VIP still answers after xdp detach")
	}
	if left, _ := filepath.Glob(filepath.Join(pins, "*", "*")); len(left) != 0 {
		t.Fatalf("pins left after xdp detach: %v", left)
	}
}

// TestXDPL2 forwards by MAC rewrite to backends on the segment: no
// encapsulation, so it works without decap.
func TestXDPL2(t *testing.T) {
	testutil.RequirePriv(t, "XDP programs and network namespaces")
	d := testutil.NewDSR(t, testutil.DSROptions{Backends: 2})
	vips := d.ServeVIPs(t, 80)
	c := newConf().raw(fmt.Sprintf("[xdp]\ninterface = %q\n", d.LB.Link)).vip("l2", vips[0].String(), `mode = "xdp"`, `forward = "l2"`).health(`type = "none"`)
	for _, b := range d.Backends {
		c.at(b.Name, netip.AddrPortFrom(b.Addr4, 80))
	}
	startLBIn(t, d.LB.NS, c.String())
	// The first packets may meet unresolved backend MACs (dropped as
	// no_neigh until the kernel's managed neighbours resolve): retry.
	seen := map[string]int{}
	testutil.Eventually(t, 10*time.Second, "both backends to answer", func() bool {
		if name, err := tryAsk(d, vips[0]); err == nil {
			seen[name]++
		}
		return seen["be1"] > 0 && seen["be2"] > 0
	})
}

// tryAsk connects from the client to a NamedEcho and returns the name it
// sent, or an error (instead of failing the test).
func tryAsk(d *testutil.DSR, addr netip.AddrPort) (string, error) {
	var name string
	err := d.Client.NS.Do(func() error {
		c, err := net.DialTimeout("tcp", addr.String(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		name, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return strings.TrimSpace(name), err
}

// TestXDPModeChange: a reload that moves a VIP from proxy to xdp mode and
// back restarts it on the other data plane; new connections work each way.
func TestXDPModeChange(t *testing.T) {
	n := newXDPNet(t, 2)
	n.LB.NS.MustExec(t, "ip", "addr", "add", n.VIP4.String()+"/32", "dev", "lo") // proxy mode needs the VIP local
	cfg := func(mode string, port int) string {
		return n.modeConf(nil, mode, port, `algorithm = "maglev"`)
	}
	lb := startLBIn(t, n.LB.NS, cfg("proxy", 8080))
	reload := func(text string, times int) {
		t.Helper()
		lb.writeConfig(t, text)
		lb.signal(t, syscall.SIGHUP)
		lb.waitLogN(t, "reload applied", times)
	}
	plane := func() string {
		v := lb.vip(t, "web")
		if v.XDP != nil {
			return "xdp"
		}
		return "proxy"
	}
	if name := n.AskTCP(t, n.vip4); !strings.HasPrefix(name, "be") || plane() != "proxy" {
		t.Fatalf("proxy mode: answered by %q on the %s plane", name, plane())
	}
	reload(cfg("xdp", 80), 1)
	lb.waitLog(t, "vip mode changed")
	if name := n.AskTCP(t, n.vip4); !strings.HasPrefix(name, "be") || plane() != "xdp" {
		t.Fatalf("after the move to xdp: answered by %q on the %s plane", name, plane())
	}
	if v := lb.vip(t, "web"); v.XDP.NewFlows == 0 {
		t.Fatalf("the xdp plane forwarded nothing: %+v", v.XDP)
	}
	reload(cfg("proxy", 8080), 2)
	if name := n.AskTCP(t, n.vip4); !strings.HasPrefix(name, "be") || plane() != "proxy" {
		t.Fatalf("back to proxy: answered by %q on the %s plane", name, plane())
	}
}

// modeConf is VIP web on the IPv4 VIP in mode over the backends' port,
// unnamed, with global's keys and the VIP's keys.
func (n *xdpNet) modeConf(global []string, mode string, port int, keys ...string) string {
	c := newConf(global...).raw(n.xdpTable("")).vip("web", n.vip4.String(), append([]string{fmt.Sprintf("mode = %q", mode)}, keys...)...).health(`type = "none"`)
	for _, be := range n.Backends {
		c.at("", netip.AddrPortFrom(be.Addr4, uint16(port)))
	}
	return c.String()
}
