package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// udpNamedEcho answers every datagram with "beN:" and the datagram, from
// backend i's namespace.
func udpNamedEcho(t *testing.T, tp *testutil.Topology, i, port int) {
	t.Helper()
	udpEchoIf(t, tp, i, port, func([]byte) bool { return true })
}

// udpEchoIf is udpNamedEcho for the datagrams answer accepts.
func udpEchoIf(t *testing.T, tp *testutil.Topology, i, port int, answer func([]byte) bool) {
	t.Helper()
	udpEchoIn(t, tp.Backends[i], "udp4", fmt.Sprintf("%s:%d", tp.BackendIP(i), port), fmt.Sprintf("be%d", i), answer)
}

// udpEchoIn answers, from ns on addr, every datagram answer accepts with
// "NAME:" and the datagram.
func udpEchoIn(t *testing.T, ns *testutil.Netns, network, addr, name string, answer func([]byte) bool) {
	t.Helper()
	var pc net.PacketConn
	ns.MustDo(t, func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	t.Cleanup(func() { pc.Close() })
	prefix := []byte(name + ":")
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if answer(buf[:n]) {
				pc.WriteTo(append(append([]byte(nil), prefix...), buf[:n]...), from)
			}
		}
	}()
}

var udpVIP = newConf().vip("dns", ":53", `protocol = "udp"`, `session_timeout = "2s"`).addrs(5300, 0, 1, 2).String()

// TestUDPThousandClients: 1000 client sockets exchange datagrams through the
// VIP; each gets its own replies, from the VIP address (the sockets are
// connected to it, so the kernel drops anything else), sessions spread over
// the backends and expire after the idle timeout, leaving no live flow.
func TestUDPThousandClients(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	for i := range 3 {
		udpNamedEcho(t, tp, i, 5300)
	}
	lb := startLB(t, tp, udpVIP)
	const clients = 1000
	conns := make([]*net.UDPConn, clients)
	tp.Client.MustDo(t, func() error {
		for i := range conns {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: tp.VIP.AsSlice(), Port: 53})
			if err != nil {
				return err
			}
			conns[i] = c
		}
		return nil
	})
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	perBackend := make(map[string]int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, err := udpExchange(c, fmt.Sprintf("client %d", i))
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			mu.Lock()
			perBackend[name]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, n := range []string{"be0", "be1", "be2"} {
		if perBackend[n] < clients/3-50 || perBackend[n] > clients/3+50 {
			t.Fatalf("sessions per backend %v, want about %d each", perBackend, clients/3)
		}
	}
	st := lb.status(t)
	if v := st.VIPs[0]; v.Accepted != clients || v.UDP.Replies < clients {
		t.Fatalf("status: %d sessions made, %d replies; want %d", v.Accepted, v.UDP.Replies, clients)
	}
	lb.waitStatus(t, 8*time.Second, "sessions to expire", func(st plane.Status) bool {
		v := st.VIPs[0]
		live := int64(0)
		for _, b := range v.Backends {
			live += b.LiveFlows
		}
		return v.Active == 0 && live == 0
	})
}

// udpExchange sends msg and returns the name of the backend that echoed it,
// retrying a lost datagram a few times (UDP may drop under load).
func udpExchange(c *net.UDPConn, msg string) (string, error) {
	buf := make([]byte, 2048)
	for try := 0; try < 5; try++ {
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", err
		}
		n, err := c.Read(buf)
		if err != nil {
			continue
		}
		name, body, ok := bytes.Cut(buf[:n], []byte(":"))
		if !ok || string(body) != msg {
			return "", fmt.Errorf("reply %q to %q", buf[:n], msg)
		}
		return string(name), nil
	}
	return "", fmt.Errorf("no reply to %q", msg)
}

var udp6VIP = newConf().vip("dns6", "[::1]:53", `protocol = "udp"`).
	backend(`name = "be0"`, `address = "[::1]:5301"`).backend(`name = "be1"`, `address = "[::1]:5302"`).String()

// TestUDPIPv6: a UDP VIP on ::1 in front of two backends on ::1 (distinct
// ports, in a namespace of the test's own): each client socket (connected
// to the VIP, so only replies from the VIP address reach it) keeps its
// session's backend, the sessions spread over both, and status counts
// every session and datagram.
func TestUDPIPv6(t *testing.T) {
	ns := testutil.NewNetns(t, "udp6")
	for i := range 2 {
		udpEchoIn(t, ns, "udp6", fmt.Sprintf("[::1]:%d", 5301+i), fmt.Sprintf("be%d", i), func([]byte) bool { return true })
	}
	lb := startLBIn(t, ns, udp6VIP)
	const clients, rounds = 8, 3
	perBackend := map[string]int{}
	for i := range clients {
		var c *net.UDPConn
		ns.MustDo(t, func() (err error) {
			c, err = net.DialUDP("udp6", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort("[::1]:53")))
			return err
		})
		t.Cleanup(func() { c.Close() })
		first := ""
		for r := range rounds {
			name, err := udpExchange(c, fmt.Sprintf("client %d round %d", i, r))
			if err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
			if first == "" {
				first = name
			} else if name != first {
				t.Fatalf("client %d: round %d answered by %s, the first by %s", i, r, name, first)
			}
		}
		perBackend[first]++
	}
	if perBackend["be0"] == 0 || perBackend["be1"] == 0 {
		t.Fatalf("sessions per backend: %v", perBackend)
	}
	v := lb.status(t).VIPs[0]
	if v.Accepted != clients || v.UDP.Datagrams < clients*rounds || v.UDP.Replies < clients*rounds {
		t.Fatalf("status: %d sessions, %d datagrams, %d replies; want %d sessions and at least %d of each",
			v.Accepted, v.UDP.Datagrams, v.UDP.Replies, clients, clients*rounds)
	}
}
