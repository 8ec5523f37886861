// dsr_serve.go: running commands, code, servers and clients inside the hosts of a DSR network.

package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// dsrIOTimeout bounds every dial, read and write of the DSR helpers, so a
// broken path fails the test instead of hanging it.
const dsrIOTimeout = 5 * time.Second

// Run runs a command inside ns and returns its combined output; a failure
// fails the test.
func (d *DSR) Run(t testing.TB, ns *Netns, args ...string) string {
	t.Helper()
	return ns.MustExec(t, args...)
}

// InNS runs fn on the calling goroutine, with its OS thread locked and
// switched into ns, and switches back after. fn may call t.Fatal. Only the
// calling goroutine is in ns: goroutines that fn starts are not, but
// sockets fn opens stay in ns for good.
func (d *DSR) InNS(t testing.TB, ns *Netns, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("get netns: %v", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(ns.Name)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("netns %s: %v", ns.Name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("enter netns %s: %v", ns.Name, err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// Stay locked: the runtime discards the thread when the test's
			// goroutine ends, so no other goroutine runs in ns.
			t.Errorf("return from netns %s: %v", ns.Name, err)
			return
		}
		runtime.UnlockOSThread()
	}()
	fn()
}

// Packets returns the packets h's veth has received and sent so far.
// Deltas around an exchange show which way traffic went: with DSR the
// lb's rx grows with the client's requests only, never with the replies.
func (d *DSR) Packets(t testing.TB, h *DSRHost) (rx, tx uint64) {
	t.Helper()
	h.NS.MustDo(t, func() error {
		l, err := netlink.LinkByName(h.Link)
		if err != nil {
			return fmt.Errorf("%s %s: %w", h.Name, h.Link, err)
		}
		st := l.Attrs().Statistics
		rx, tx = st.RxPackets, st.TxPackets
		return nil
	})
	return rx, tx
}

// connSet tracks a server's open connections so that cleanup can close
// them: an open socket keeps its namespace alive after `ip netns del`.
type connSet struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[io.Closer]struct{}
	closed bool // closeAll ran: what arrives later is closed at once
}

func (s *connSet) add(c io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return
	}
	s.conns[c] = struct{}{}
}

func (s *connSet) remove(c io.Closer) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// ServeTCP listens on addr inside h's namespace and runs handler for each
// connection (closing it when handler returns) until cleanup, which closes
// the listener and every connection still open. Echo and NamedEcho(h.Name)
// fit as handlers.
func (d *DSR) ServeTCP(t testing.TB, h *DSRHost, addr netip.AddrPort, handler func(net.Conn)) {
	t.Helper()
	var ln net.Listener
	h.NS.MustDo(t, func() error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		if err != nil {
			return fmt.Errorf("listen %s in %s: %w", addr, h.Name, err)
		}
		return nil
	})
	s := &connSet{conns: map[io.Closer]struct{}{ln: {}}}
	s.wg.Go(func() { s.accept(ln, handler) })
	t.Cleanup(s.closeAll)
}

func (s *connSet) accept(ln net.Listener, handler func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.add(c)
		s.wg.Go(func() {
			defer s.remove(c)
			defer c.Close()
			handler(c)
		})
	}
}

// ServeUDP answers every datagram to addr inside h's namespace with h's
// name, a newline and the datagram, until cleanup.
func (d *DSR) ServeUDP(t testing.TB, h *DSRHost, addr netip.AddrPort) {
	t.Helper()
	var pc *net.UDPConn
	h.NS.MustDo(t, func() error {
		var err error
		pc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return fmt.Errorf("listen udp %s in %s: %w", addr, h.Name, err)
		}
		return nil
	})
	s := &connSet{conns: map[io.Closer]struct{}{pc: {}}}
	s.wg.Go(func() { namedUDPEcho(pc, h.Name) })
	t.Cleanup(s.closeAll)
}

// namedUDPEcho answers until pc is closed; the reply leaves from the
// address the datagram came to (the VIP), as DSR needs.
func namedUDPEcho(pc *net.UDPConn, name string) {
	ServeDatagrams(pc, func(payload []byte) []byte { return append([]byte(name+"\n"), payload...) })
}

// ServeVIPs starts, on every backend and for every VIP address, a TCP
// NamedEcho and a UDP named echo on port, and returns the VIP addresses
// with that port.
func (d *DSR) ServeVIPs(t testing.TB, port uint16) []netip.AddrPort {
	t.Helper()
	var out []netip.AddrPort
	for _, vip := range d.VIPs() {
		ap := netip.AddrPortFrom(vip, port)
		out = append(out, ap)
		for _, b := range d.Backends {
			d.ServeTCP(t, b, ap, NamedEcho(b.Name))
			d.ServeUDP(t, b, ap)
		}
	}
	return out
}

// DialTCP connects to addr from the client's namespace; the connection is
// closed on cleanup.
func (d *DSR) DialTCP(t testing.TB, addr netip.AddrPort) *net.TCPConn {
	t.Helper()
	return dialFrom(t, d.Client, "tcp", addr).(*net.TCPConn)
}

// DialUDP returns a UDP socket in the client's namespace connected to
// addr; it is closed on cleanup.
func (d *DSR) DialUDP(t testing.TB, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	return dialFrom(t, d.Client, "udp", addr).(*net.UDPConn)
}

func dialFrom(t testing.TB, h *DSRHost, network string, addr netip.AddrPort) net.Conn {
	t.Helper()
	var c net.Conn
	h.NS.MustDo(t, func() error {
		var err error
		c, err = net.DialTimeout(network, addr.String(), dsrIOTimeout)
		if err != nil {
			return fmt.Errorf("dial %s %s from %s: %w", network, addr, h.Name, err)
		}
		return nil
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// AskTCP connects from the client to addr, served by NamedEcho, checks
// that a message comes back intact and returns the name of the backend
// that answered.
func (d *DSR) AskTCP(t testing.TB, addr netip.AddrPort) string {
	t.Helper()
	c := d.DialTCP(t, addr)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(dsrIOTimeout))
	br := bufio.NewReader(c)
	name, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("tcp %s: greeting: %v", addr, err)
	}
	msg := []byte("dsr tcp " + addr.String())
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("tcp %s: write: %v", addr, err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("tcp %s: echo %q, %v; want %q", addr, got, err, msg)
	}
	return strings.TrimSuffix(name, "\n")
}

// AskUDP sends one datagram from the client to addr, served by ServeUDP,
// checks the echo and returns the name of the backend that answered.
func (d *DSR) AskUDP(t testing.TB, addr netip.AddrPort) string {
	t.Helper()
	c := d.DialUDP(t, addr)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(dsrIOTimeout))
	msg := []byte("dsr udp " + addr.String())
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("udp %s: write: %v", addr, err)
	}
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("udp %s: read: %v", addr, err)
	}
	name, payload, ok := bytes.Cut(buf[:n], []byte("\n"))
	if !ok || !bytes.Equal(payload, msg) {
		t.Fatalf("udp %s: reply %q; want NAME\\n%q", addr, buf[:n], msg)
	}
	return string(name)
}
