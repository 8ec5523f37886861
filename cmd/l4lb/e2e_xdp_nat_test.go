// End to end with forward = "nat": client -> l4lb (XDP) -> unmodified
// backends (no decap, no VIP on lo) -> back through l4lb -> client.

package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// natNet is a DSR network whose backends are left as they are, serving
// TCP and UDP on their own addresses, port 80: each connection or
// datagram is answered with "NAME SOURCE\n" (the source the backend saw),
// then echoed.
type natNet struct {
	*testutil.DSR
}

func newNATNet(t *testing.T, backends int) *natNet {
	t.Helper()
	testutil.RequirePriv(t, "XDP programs and network namespaces")
	n := &natNet{testutil.NewDSR(t, testutil.DSROptions{Backends: backends, IPv6: true, Unmodified: true})}
	for _, b := range n.Backends {
		for _, a := range b.Addrs() {
			ap := netip.AddrPortFrom(a, 80)
			n.ServeTCP(t, b, ap, sourceEcho(b.Name))
			serveUDPSource(t, b, ap)
		}
	}
	return n
}

// sourceEcho greets with the backend's name and the peer it sees, then
// echoes.
func sourceEcho(name string) func(net.Conn) {
	return func(c net.Conn) {
		if _, err := fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr()); err == nil {
			_, _ = io.Copy(c, c)
		}
	}
}

// serveUDPSource answers each datagram with "NAME SOURCE\n" and the
// datagram, until cleanup.
func serveUDPSource(t *testing.T, h *testutil.DSRHost, addr netip.AddrPort) {
	t.Helper()
	var pc *net.UDPConn
	h.NS.MustDo(t, func() (err error) {
		pc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			out := append([]byte(fmt.Sprintf("%s %s\n", h.Name, from)), buf[:n]...)
			if _, err := pc.WriteToUDPAddrPort(out, from); err != nil {
				return
			}
		}
	}()
}

// natConf is the config: global's lines, [xdp] with more lines, and nat VIPs web4/dns4
// (IPv4) and web6/dns6 (IPv6) on port 80 over the backends is.
func (n *natNet) natConf(global []string, xdp string, is ...int) string {
	c := newConf(append([]string{`drain_timeout = "1s"`}, global...)...).raw(fmt.Sprintf("[xdp]\ninterface = %q\n%s\n", n.LB.Link, xdp))
	probe := []string{`type = "tcp"`, `interval = "1s"`, `timeout = "1s"`}
	for _, v := range []struct {
		name, proto string
		vip         netip.Addr
	}{{"web4", "tcp", n.VIP4}, {"dns4", "udp", n.VIP4}, {"web6", "tcp", n.VIP6}, {"dns6", "udp", n.VIP6}} {
		c.vip(v.name, netip.AddrPortFrom(v.vip, 80).String(), `mode = "xdp"`, `forward = "nat"`, fmt.Sprintf("protocol = %q", v.proto)).health(probe...)
		for _, i := range is {
			b := n.Backends[i]
			a := b.Addr4
			if v.vip.Is6() {
				a = b.Addr6
			}
			c.at(b.Name, netip.AddrPortFrom(a, 80))
		}
	}
	return c.String()
}

// natGreeting reads "NAME SOURCE" and returns both.
func natGreeting(t *testing.T, r *bufio.Reader) (string, netip.AddrPort) {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("greeting: %v", err)
	}
	name, src, _ := strings.Cut(strings.TrimSpace(line), " ")
	ap, err := netip.ParseAddrPort(src)
	if err != nil {
		t.Fatalf("greeting %q: %v", line, err)
	}
	return name, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// wantNATSource fails unless src is the balancer's address of vip's
// family and a port of the NAT range.
func (n *natNet) wantNATSource(t *testing.T, src netip.AddrPort, vip netip.Addr, lo, hi uint16) {
	t.Helper()
	lb := n.LB.Addr4
	if vip.Is6() {
		lb = n.LB.Addr6
	}
	if src.Addr() != lb || src.Port() < lo || src.Port() > hi {
		t.Fatalf("backend saw %v, want %v with a port in %d-%d", src, lb, lo, hi)
	}
}

// shaTransfer sends size random bytes on c and reads the echo, comparing
// SHA-256 sums.
func shaTransfer(t *testing.T, c net.Conn, r io.Reader, size int) {
	t.Helper()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	msg := make([]byte, size)
	rand.Read(msg)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(msg); errc <- err }()
	h := sha256.New()
	if _, err := io.CopyN(h, r, int64(size)); err != nil {
		t.Fatalf("echo of %d bytes: %v", size, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if want := sha256.Sum256(msg); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("echo of %d bytes: SHA-256 differs", size)
	}
}

// udpExchange sends count datagrams of size bytes one at a time on a new
// socket to vip and checks each echo byte for byte; it returns the
// source the backend saw.
func (n *natNet) udpExchange(t *testing.T, vip netip.AddrPort, count, size int) netip.AddrPort {
	t.Helper()
	c := n.DialUDP(t, vip)
	sum, back := sha256.New(), sha256.New()
	var src netip.AddrPort
	buf := make([]byte, 65536)
	for i := range count {
		msg := make([]byte, size)
		rand.Read(msg)
		sum.Write(msg)
		var got []byte
		for try := 0; got == nil; try++ { // UDP: a lost datagram is sent again
			if try == 5 {
				t.Fatalf("udp %v datagram %d: no echo after %d tries", vip, i, try)
			}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write(msg); err != nil {
				t.Fatalf("udp write: %v", err)
			}
			m, err := c.Read(buf)
			if err != nil {
				continue
			}
			line, payload, ok := bytes.Cut(buf[:m], []byte("\n"))
			if !ok {
				t.Fatalf("udp reply %q", buf[:m])
			}
			_, s, _ := strings.Cut(string(line), " ")
			ap, _ := netip.ParseAddrPort(s)
			src = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			got = payload
		}
		back.Write(got)
	}
	if !bytes.Equal(sum.Sum(nil), back.Sum(nil)) {
		t.Fatalf("udp %v: %d datagrams of %d bytes came back different", vip, count, size)
	}
	return src
}

// TestXDPNAT: with forward = "nat", backends that know nothing of the
// balancer (no decap, no VIP) serve TCP and UDP over IPv4 and IPv6, see
// the balancer's NAT address and a port of the range as the source, and
// 4 MiB each way come back byte for byte; the replies cross the balancer
// and status counts the mappings and replies.
func TestXDPNAT(t *testing.T) {
	n := newNATNet(t, 2)
	lb := startLBIn(t, n.LB.NS, n.natConf(nil, "nat_port_min = 20000\nnat_port_max = 29999", 0, 1))
	for _, vip := range n.VIPs() {
		t.Run(vip.String(), func(t *testing.T) {
			web := netip.AddrPortFrom(vip, 80)
			c := n.DialTCP(t, web)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			r := bufio.NewReader(c)
			name, src := natGreeting(t, r)
			if !strings.HasPrefix(name, "be") {
				t.Fatalf("answered by %q", name)
			}
			n.wantNATSource(t, src, vip, 20000, 29999)
			shaTransfer(t, c, r, 4<<20)
			n.wantNATSource(t, n.udpExchange(t, web, 200, 1200), vip, 20000, 29999)
		})
	}
	seen := map[string]int{}
	for range 20 {
		c := n.DialTCP(t, netip.AddrPortFrom(n.VIP4, 80))
		c.SetDeadline(time.Now().Add(10 * time.Second))
		name, _ := natGreeting(t, bufio.NewReader(c))
		seen[name]++
		c.Close()
	}
	if len(seen) != 2 {
		t.Errorf("20 connections went to %v, want both backends", seen)
	}
	st := lb.status(t)
	if st.XDP == nil || st.XDP.Counters["nat_new"] < 24 || st.XDP.Counters["nat_reply"] < 1000 || st.XDP.Counters["drop_nat_exhausted"] != 0 {
		t.Fatalf("xdp counters %v: want nat_new >= 24, nat_reply >= 1000, no drop_nat_exhausted", st.XDP)
	}
}

// TestXDPNATExhausted: with two NAT ports and one backend, two TCP
// connections take them; a third gets none: its SYNs are dropped and
// counted (drop_nat_exhausted, in status and metrics), and the two keep
// their ports, byte for byte, never shared with it.
func TestXDPNATExhausted(t *testing.T) {
	n := newNATNet(t, 1)
	metrics := netip.AddrPortFrom(n.LB.Addr4, 9370)
	cfg := n.natConf([]string{fmt.Sprintf("metrics_listen = %q", metrics)}, "nat_port_min = 20000\nnat_port_max = 20001", 0)
	lb := startLBIn(t, n.LB.NS, cfg)
	web := netip.AddrPortFrom(n.VIP4, 80)
	type held struct {
		c   *net.TCPConn
		r   *bufio.Reader
		src netip.AddrPort
	}
	var conns []held
	for range 2 {
		c := n.DialTCP(t, web)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(c)
		_, src := natGreeting(t, r)
		n.wantNATSource(t, src, n.VIP4, 20000, 20001)
		conns = append(conns, held{c, r, src})
	}
	if conns[0].src == conns[1].src {
		t.Fatalf("two connections share %v", conns[0].src)
	}
	var err error
	n.Client.NS.MustDo(t, func() error {
		var c net.Conn
		c, err = net.DialTimeout("tcp", web.String(), 1500*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return nil
	})
	if err == nil {
		t.Fatal("a third connection got through with every NAT port held")
	}
	testutil.Eventually(t, 5*time.Second, "drop_nat_exhausted in status", func() bool {
		st := lb.status(t)
		return st.XDP != nil && st.XDP.Counters["drop_nat_exhausted"] > 0
	})
	if m := scrape(t, n.LB.NS, metrics, "/metrics"); !strings.Contains(m, `l4lb_xdp_events_total{event="drop_nat_exhausted"} `) {
		t.Error("metrics lack drop_nat_exhausted")
	}
	for _, h := range conns {
		shaTransfer(t, h.c, h.r, 1<<20)
	}
}
