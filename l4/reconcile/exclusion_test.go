// A backend marked down gets no new flow, whatever the algorithm: tested
// by what the balancer picks (the backend's own flow counter and the
// clients that reach it), with a backend whose data port keeps serving
// while its health port says it is down, so that a client sent there
// would be served by it instead of failing and being retried elsewhere.

package reconcile

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// hostedBackend is a backend on a loopback address of its own, serving on
// its data port (TCP: NamedEcho, UDP: an echo prefixed "name:") and
// answering health checks on a TCP port that every backend shares.
type hostedBackend struct {
	name   string
	data   netip.AddrPort
	health net.Listener
	stop   func() // closes the data server's socket
}

// startHosted starts one backend per name on 127.0.0.11, .12, ... with
// the same free health port on each, and returns them and that port.
func startHosted(t *testing.T, proto string, names ...string) ([]*hostedBackend, uint16) {
	t.Helper()
	for range 20 {
		hs, port, ok := tryHosted(t, proto, names)
		if ok {
			return hs, port
		}
	}
	t.Fatal("no health port free on every backend address after 20 tries")
	return nil, 0
}

func tryHosted(t *testing.T, proto string, names []string) ([]*hostedBackend, uint16, bool) {
	t.Helper()
	probe := testutil.ListenLoopback(t) // a port below the ephemeral range
	port := uint16(probe.Addr().(*net.TCPAddr).Port)
	probe.Close()
	var hs []*hostedBackend
	for i, name := range names {
		ip := netip.AddrFrom4([4]byte{127, 0, 0, byte(11 + i)})
		hln, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, port)))
		if err != nil {
			for _, h := range hs {
				h.health.Close()
			}
			return nil, 0, false
		}
		t.Cleanup(func() { hln.Close() })
		testutil.ServeConns(hln, func(net.Conn) {})
		data, stop := serveData(t, proto, ip, name)
		hs = append(hs, &hostedBackend{name: name, data: data, health: hln, stop: stop})
	}
	return hs, port, true
}

// serveData starts the backend's data server on ip; stop closes its
// socket.
func serveData(t *testing.T, proto string, ip netip.Addr, name string) (addr netip.AddrPort, stop func()) {
	t.Helper()
	if proto == "tcp" {
		ln, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		testutil.ServeConns(ln, testutil.NamedEcho(name))
		return ln.Addr().(*net.TCPAddr).AddrPort(), func() { ln.Close() }
	}
	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go testutil.ServeDatagrams(pc, func(payload []byte) []byte { return append([]byte(name+":"), payload...) })
	return pc.LocalAddr().(*net.UDPAddr).AddrPort(), func() { pc.Close() }
}

const exclusionVIP = `
[global]
admin_socket = "off"
[[vip]]
name = "v"
listen = "%s"
protocol = "%s"
algorithm = "%s"
  [vip.health]
  type = "tcp"
  port = %d
  interval = "200ms"
  timeout = "200ms"
  rise = 1
  fall = 2
  max_fails = 0
`

// exclusionVIP's checks: a closed health port fails at once (refused), so
// b goes down within two intervals; a live backend must not, even when a
// busy machine delays a probe (with timeout 50ms and fall 1, a and c both
// went down under make stress and a client was reset).

// newFlowFrom opens a new flow to vip from source address 127.0.0.<src>
// (every call a new connection or UDP session) and returns the name of
// the backend that answered and the client socket, which the caller
// closes: the flow stays live until then, so that least_conn and
// least_time see the load.
func newFlowFrom(proto string, vip netip.AddrPort, src int) (string, net.Conn, error) {
	local := netip.AddrFrom4([4]byte{127, 0, 0, byte(src)})
	if proto == "tcp" {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))}
		c, err := d.Dial("tcp4", vip.String())
		if err != nil {
			return "", nil, err
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			c.Close()
			return "", nil, err
		}
		return strings.TrimSpace(string(buf[:n])), c, nil
	}
	c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)), net.UDPAddrFromAddrPort(vip))
	if err != nil {
		return "", nil, err
	}
	name, err := udpAsk(c, "hello")
	if err != nil {
		c.Close()
		return "", nil, err
	}
	return name, c, nil
}

// udpAsk sends msg on c until a reply comes (up to 5 tries of 400 ms)
// and returns the name that prefixed it.
func udpAsk(c *net.UDPConn, msg string) (string, error) {
	buf := make([]byte, 2048)
	err := fmt.Errorf("no reply to %q", msg)
	for range 5 {
		c.SetDeadline(time.Now().Add(400 * time.Millisecond))
		if _, werr := c.Write([]byte(msg)); werr != nil {
			err = werr
			continue
		}
		n, rerr := c.Read(buf)
		if rerr != nil {
			err = rerr
			continue
		}
		name, body, ok := bytes.Cut(buf[:n], []byte(":"))
		if !ok || string(body) != msg {
			return "", fmt.Errorf("reply %q to %q", buf[:n], msg)
		}
		return string(name), nil
	}
	return "", err
}

// askAll opens one flow from each of n source addresses, holding them
// all open until the last has answered, and counts the backends that
// answered.
func askAll(t *testing.T, proto string, vip netip.AddrPort, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for i := range n {
		name, c, err := newFlowFrom(proto, vip, 100+i)
		if err != nil {
			t.Fatalf("flow from 127.0.0.%d: %v", 100+i, err)
		}
		defer c.Close()
		seen[name]++
	}
	return seen
}

// TestDownBackendGetsNoNewFlows: for every algorithm, TCP and UDP, a
// backend whose health port closed is marked down and from then on
// picked for no new flow: its flow counter stands still and no client
// reaches it, although its data port still serves (so the test does not
// rest on a failed connect being retried elsewhere). Before, the same
// clients did reach it: the client set can tell.
func TestDownBackendGetsNoNewFlows(t *testing.T) {
	const flows = 48
	for _, proto := range []string{"tcp", "udp"} {
		for _, alg := range []string{"round_robin", "least_conn", "p2c", "least_time", "random", "source_hash", "maglev"} {
			t.Run(proto+"/"+alg, func(t *testing.T) {
				hs, port := startHosted(t, proto, "a", "b", "c")
				addrs := map[string]netip.AddrPort{}
				for _, h := range hs {
					addrs[h.name] = h.data
				}
				vip := testutil.FreeTCPAddr(t) // as a UDP port too: nothing listens there
				rt := startRuntime(t, fmt.Sprintf(exclusionVIP, vip, proto, alg, port)+backendsTOML(addrs))
				for _, h := range hs {
					waitBackend(t, rt, "v", h.name, 10*time.Second, "up", func(b plane.BackendStatus) bool { return b.Health == "up" })
				}
				if seen := askAll(t, proto, vip, flows); seen["b"] == 0 {
					t.Fatalf("before b went down: %v, want some flows on b (else the check below proves nothing)", seen)
				}

				hs[1].health.Close()
				waitBackend(t, rt, "v", "b", 10*time.Second, "down", func(b plane.BackendStatus) bool { return b.Health == "down" })
				before, _ := backendStatus(rt, "v", "b")
				seen := askAll(t, proto, vip, flows)
				after, _ := backendStatus(rt, "v", "b")
				if seen["b"] != 0 || after.Flows != before.Flows || after.ConnectFails != before.ConnectFails {
					t.Fatalf("after b was marked down: clients reached %v; b's flows %d -> %d, connect fails %d -> %d; want b never picked",
						seen, before.Flows, after.Flows, before.ConnectFails, after.ConnectFails)
				}
				if seen["a"]+seen["c"] != flows {
					t.Fatalf("after b was marked down: %v, want all %d flows on a and c", seen, flows)
				}
			})
		}
	}
}

const passiveUDPVIP = `
[global]
admin_socket = "off"
[[vip]]
name = "v"
listen = "%s"
protocol = "udp"
algorithm = "source_hash"
  [vip.health]
  type = "none"
  max_fails = 1
`

// TestUDPDeadBackendMarkedByICMP: a UDP backend with passive health only
// dies (its socket closes: the kernel answers ICMP port unreachable). The
// first datagram of a session on it fails on l4lb's backend socket, which
// marks it down at once; the session's next datagram moves to a live
// backend, and new sessions never reach the dead one. source_hash keeps
// every client on its backend until then, so nothing but the mark can
// move a session (round robin would hand out another backend anyway).
func TestUDPDeadBackendMarkedByICMP(t *testing.T) {
	const flows = 48
	hs, _ := startHosted(t, "udp", "a", "b", "c")
	addrs := map[string]netip.AddrPort{}
	for _, h := range hs {
		addrs[h.name] = h.data
	}
	vip := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, fmt.Sprintf(passiveUDPVIP, vip)+backendsTOML(addrs))
	var onB []*net.UDPConn
	for i := range flows {
		name, c, err := newFlowFrom("udp", vip, 100+i)
		if err != nil {
			t.Fatalf("flow from 127.0.0.%d: %v", 100+i, err)
		}
		defer c.Close()
		if name == "b" {
			onB = append(onB, c.(*net.UDPConn))
		}
	}
	if len(onB) == 0 {
		t.Fatal("no session on b: the test proves nothing")
	}

	hs[1].stop()
	for i, c := range onB { // each retries: the first datagram meets the ICMP error
		name, err := udpAsk(c, "again")
		if err != nil || name == "b" {
			t.Fatalf("session %d of %d on b after b died: reply from %q, %v; want it moved to a or c", i, len(onB), name, err)
		}
	}
	st, _ := backendStatus(rt, "v", "b")
	if st.Health != "down" || !strings.HasPrefix(st.Reason, "passive") {
		t.Fatalf("b after its sessions failed: health %s (%s), want down by a passive mark", st.Health, st.Reason)
	}
	seen := askAll(t, "udp", vip, flows)
	after, _ := backendStatus(rt, "v", "b")
	if seen["b"] != 0 || after.Flows != st.Flows {
		t.Fatalf("new sessions after b was marked down: %v, b's flows %d -> %d; want none on b", seen, st.Flows, after.Flows)
	}
}
