// End to end through namespaces: client -> xdp_lb (attached, native) ->
// backend (xdp_decap attached by netlink) -> straight back to the client.

package bpf

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// e2eNet is a DSR network with the balancer and decap attached.
type e2eNet struct {
	d      *testutil.DSR
	lb     *LB
	decaps []*Decap
}

// newE2E builds the network: backends 1..n are the hosts' IPv4
// addresses, n+1..2n their IPv6 ones; the lb keeps their neighbours
// resolved (as the control plane must).
func newE2E(t *testing.T) *e2eNet {
	return newE2EWith(t, testutil.DSROptions{Backends: 2, IPv6: true})
}

// newE2EWith is newE2E on a DSR network built with opts.
func newE2EWith(t *testing.T, opts testutil.DSROptions) *e2eNet {
	d := testutil.NewDSR(t, opts)
	e := &e2eNet{d: d, lb: newTestLB(t, testOptions)}
	must(t, e.lb.SetSource(d.LB.Addr4, d.LB.Addr6))
	n := uint32(len(d.Backends))
	for i, b := range d.Backends {
		must(t, e.lb.SetBackend(uint32(i)+1, BackendEntry{Addr: b.Addr4, MAC: b.MAC, Active: true}))
		must(t, e.lb.SetBackend(uint32(i)+1+n, BackendEntry{Addr: b.Addr6, MAC: b.MAC, Active: true}))
		for _, a := range b.Addrs() {
			d.LB.NS.MustExec(t, "ip", "neigh", "replace", a.String(), "lladdr", b.MAC.String(), "dev", d.LB.Link, "nud", "permanent")
		}
		e.attachDecap(t, b)
		startEcho(t, b, d.VIPs())
	}
	d.LB.NS.MustDo(t, func() error {
		ifc, err := net.InterfaceByName(d.LB.Link)
		if err != nil {
			return err
		}
		return e.lb.Attach(ifc.Index, AttachDriver)
	})
	return e
}

func (e *e2eNet) attachDecap(t *testing.T, h *testutil.DSRHost) {
	h.NS.MustDo(t, func() error {
		ifc, err := net.InterfaceByName(h.Link)
		if err != nil {
			return err
		}
		dc, err := AttachDecap(ifc.Index, AttachDriver)
		if err != nil {
			return err
		}
		e.decaps = append(e.decaps, dc)
		t.Cleanup(func() {
			dc.Close()
			h.NS.MustDo(t, func() error { _, err := DetachDecap(ifc.Index); return err })
		})
		return nil
	})
}

// startEcho runs a TCP echo server on port 7 of every address (the VIPs
// on lo included) in the host's namespace, and UDP echo servers on the
// VIPs' port 7: a wildcard UDP socket would answer from the host's own
// address, which the client's connected socket ignores.
func startEcho(t *testing.T, h *testutil.DSRHost, vips []netip.Addr) {
	h.NS.MustDo(t, func() error {
		ln, err := net.Listen("tcp", ":7")
		if err != nil {
			return err
		}
		t.Cleanup(func() { ln.Close() })
		go testutil.ServeConns(ln, testutil.Echo)
		for _, v := range vips {
			pc, err := net.ListenPacket("udp", netip.AddrPortFrom(v, 7).String())
			if err != nil {
				return err
			}
			t.Cleanup(func() { pc.Close() })
			go udpEcho(pc)
		}
		return nil
	})
}

func udpEcho(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(buf[:n], from)
	}
}

// echoTCP sends size random bytes to addr from the client and checks
// that the same bytes come back.
func (e *e2eNet) echoTCP(addr netip.AddrPort, size int) error {
	var c net.Conn
	err := e.d.Client.NS.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr.String(), 3*time.Second)
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := make([]byte, size)
	_, _ = rand.Read(msg)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		errc <- err
	}()
	got := make([]byte, size)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read echo: %w", err)
	}
	if err := <-errc; err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo differs")
	}
	return nil
}

// echoUDP sends one datagram to addr and waits for its echo.
func (e *e2eNet) echoUDP(addr netip.AddrPort) error {
	return e.d.Client.NS.Do(func() error {
		c, err := net.Dial("udp", addr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		for try := 0; try < 5; try++ {
			if _, err := c.Write([]byte("ping")); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			buf := make([]byte, 16)
			if n, err := c.Read(buf); err == nil && string(buf[:n]) == "ping" {
				return nil
			}
		}
		return fmt.Errorf("no udp echo from %v", addr)
	})
}

// TestEndToEnd: TCP (1 MiB echo) and UDP through the attached balancer in
// both forward modes and both families; replies go straight to the
// client; the counters of both programs saw it.
func TestEndToEnd(t *testing.T) {
	e := newE2E(t)
	d := e.d
	for i, c := range []struct {
		vip   netip.Addr
		fwd   l4.Forward
		table []uint32
	}{
		{d.VIP4, l4.ForwardIPIP, []uint32{1, 2}},
		{d.VIP6, l4.ForwardIPIP, []uint32{3, 4}},
		{d.VIP4, l4.ForwardL2, []uint32{2, 1}},
		{d.VIP6, l4.ForwardL2, []uint32{4, 3}},
	} {
		addr := netip.AddrPortFrom(c.vip, 7)
		t.Run(fmt.Sprintf("%v/%v", c.fwd, addr), func(t *testing.T) {
			for j, p := range []l4.Protocol{l4.TCP, l4.UDP} {
				addVIP(t, e.lb, l4.VIPKey{Addr: addr, Proto: p}, uint32(2*i+j), c.fwd, l4.HashFiveTuple, c.table)
			}
			before, _ := e.lb.GlobalStats()
			if err := e.echoTCP(addr, 1<<20); err != nil {
				t.Fatalf("tcp: %v", err)
			}
			if err := e.echoUDP(addr); err != nil {
				t.Fatalf("udp: %v", err)
			}
			after, _ := e.lb.GlobalStats()
			if fwd := after[CounterTX] - before[CounterTX]; fwd < 100 {
				t.Errorf("xdp_lb forwarded only %d packets of a 1 MiB echo", fwd)
			}
		})
	}
	s := e.decapStats(t)
	if s.OuterV4 == 0 || s.OuterV6 == 0 {
		t.Errorf("decap stats %+v: both families should have been decapsulated", s)
	}
	g, _ := e.lb.GlobalStats()
	t.Logf("xdp_lb: %v; decap: %+v", nonZero(g), s)
}
