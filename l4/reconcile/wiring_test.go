// Settings that reach a running VIP's traffic, each seen directly on
// loopback: probe RTTs in the backend's estimate, max_conns of the VIP and
// of a backend, the deny list, a reload that removes a backend under an
// established connection, and an affinity pin that expires after the
// configured affinity_timeout.

package reconcile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// wiredVIPOne is VIP "w" in front of backend s1 (a TCP named echo); extra
// goes into the [[vip]] table. Arguments: listen, extra, s1's address.
const wiredVIPOne = `
[global]
admin_socket = "off"
[[vip]]
name = "w"
listen = "%s"
%s
  [vip.health]
  type = "none"
  [[vip.backend]]
  name = "s1"
  address = "%s"
`

// wiredVIP is wiredVIPOne with backend s2 too; s1extra goes into s1's
// backend table. Arguments: listen, extra, s1's address, s1extra, s2's
// address.
const wiredVIP = wiredVIPOne + `%s
  [[vip.backend]]
  name = "s2"
  address = "%s"
`

func wiredRuntime(t *testing.T, extra, s1extra string) (*Runtime, netip.AddrPort) {
	t.Helper()
	s1, s2 := startNamed(t, "s1"), startNamed(t, "s2")
	vip := testutil.FreeTCPAddr(t)
	return startRuntime(t, fmt.Sprintf(wiredVIP, vip, extra, s1.addr, s1extra, s2.addr)), vip
}

// TestProbeRTTReachesBackend: the handshake time of every active probe
// feeds the backend's RTT estimate, which least_time and status read. The
// VIP balances round robin, so the proxy measures no connect of its own:
// the probes are the only source, and no client connects.
func TestProbeRTTReachesBackend(t *testing.T) {
	s1 := startNamed(t, "s1")
	vip := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, fmt.Sprintf(`
[global]
admin_socket = "off"
[[vip]]
name = "w"
listen = "%s"
  [vip.health]
  type = "tcp"
  interval = "100ms"
  timeout = "100ms"
  [[vip.backend]]
  name = "s1"
  address = "%s"
`, vip, s1.addr))
	waitBackend(t, rt, "w", "s1", 10*time.Second, "an RTT estimate from the probes", func(b plane.BackendStatus) bool {
		return b.Health == "up" && b.RTT > 0
	})
	if b, _ := backendStatus(rt, "w", "s1"); b.Flows != 0 {
		t.Fatalf("%d flows: the estimate may not come from the probes alone", b.Flows)
	}
}

// TestVIPMaxConnsReachesListener: with max_conns = 2 the VIP holds a
// third client in the listen backlog (connected by the kernel, never
// answered) until one of the first two ends.
func TestVIPMaxConnsReachesListener(t *testing.T) {
	rt, vip := wiredRuntime(t, "max_conns = 2", "")
	for range 2 {
		c, err := net.DialTimeout("tcp4", vip.String(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	third, err := net.DialTimeout("tcp4", vip.String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	// Time for a VIP without the cap to accept and answer it.
	third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if line, err := bufio.NewReader(third).ReadString('\n'); !isTimeout(err) {
		t.Fatalf("a third connection under max_conns = 2 was served: %q, %v", line, err)
	}
	if n := rt.Status().VIPs[0].Accepted; n != 2 {
		t.Fatalf("%d connections accepted under max_conns = 2", n)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestBackendMaxConnsReachesPicks: s1 has max_conns = 1; once it holds a
// connection, every further one goes to s2, which round robin would
// otherwise alternate with it.
func TestBackendMaxConnsReachesPicks(t *testing.T) {
	rt, vip := wiredRuntime(t, "", "  max_conns = 1")
	if b, _ := backendStatus(rt, "w", "s1"); b.MaxFlows != 1 {
		t.Fatalf("s1's cap in status: %d, want 1", b.MaxFlows)
	}
	held := map[string]int{}
	for range 6 {
		c, err := net.DialTimeout("tcp4", vip.String(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		name, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		held[strings.TrimSpace(name)]++
	}
	if held["s1"] != 1 || held["s2"] != 5 {
		t.Fatalf("6 connections held with s1 capped at 1: %v, want s1 1, s2 5", held)
	}
}

// TestDenyListRefusesClients: a client in deny is reset before any
// backend is chosen and counted; its neighbour is served.
func TestDenyListRefusesClients(t *testing.T) {
	rt, vip := wiredRuntime(t, `deny = ["127.0.0.66/32"]`, "")
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(clientAddr(66, 0))}
	c, err := d.Dial("tcp4", vip.String())
	if err == nil {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 64))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("denied client 127.0.0.66: %v, want a reset (ECONNRESET)", err)
	}
	if name := askFrom(t, vip, clientAddr(67, 0)); name != "s1" && name != "s2" {
		t.Fatalf("client 127.0.0.67 reached %q", name)
	}
	st := rt.Status().VIPs[0]
	if st.Denied != 1 || st.Accepted != 2 {
		t.Fatalf("denied %d of %d accepted, want 1 of 2", st.Denied, st.Accepted)
	}
	for _, b := range st.Backends {
		if b.Flows+b.ConnectFails > 1 {
			t.Fatalf("backend %s picked %d times: the denied client reached a backend", b.ID, b.Flows+b.ConnectFails)
		}
	}
}

// TestReloadRemovingBackendKeepsConnections: a reload that takes a static
// backend out sends it no new connection, and its established one goes on
// carrying bytes both ways, through later reloads too, until the client
// ends it with an orderly close; then the backend leaves status.
func TestReloadRemovingBackendKeepsConnections(t *testing.T) {
	s1, s2 := startNamed(t, "s1"), startNamed(t, "s2")
	vip := testutil.FreeTCPAddr(t)
	only := func(extra string) string { return fmt.Sprintf(wiredVIPOne, vip, extra, s1.addr) }
	rt := startRuntime(t, fmt.Sprintf(wiredVIP, vip, "", s1.addr, "", s2.addr))
	held := dialUntil(t, vip, "s2")
	defer held.Close()
	echo(t, held, "before")

	apply(t, rt, only(""))
	if seen := dialMany(t, vip, 6); seen["s1"] != 6 {
		t.Fatalf("new connections after s2's removal: %v, want all on s1", seen)
	}
	echo(t, held, "after the reload")
	if b, ok := backendStatus(rt, "w", "s2"); !ok || !b.Removed || b.LiveFlows != 1 {
		t.Fatalf("removed s2 with an established connection: %+v (listed %v)", b, ok)
	}
	// Another reload (a setting changed, a new snapshot published) leaves
	// it alone as well, and so does time.
	apply(t, rt, only(`retries = 1`))
	time.Sleep(200 * time.Millisecond)
	echo(t, held, "after a second reload")

	// The client ends it: an orderly close both ways, no reset.
	if err := held.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(held); err != nil || len(rest) != 0 {
		t.Fatalf("closing the connection to removed s2: read %q, %v; want an orderly EOF", rest, err)
	}
	testutil.Eventually(t, 5*time.Second, "removed s2 to leave status once its connection ended", func() bool {
		_, listed := backendStatus(rt, "w", "s2")
		return !listed
	})
}

// TestAffinityPinExpires: a client pinned to a backend keeps reaching it
// while the pin is used (even once the backend is drained: a drain keeps
// pins), and is balanced anew once the pin has gone unused for
// affinity_timeout: the pin expires by the VIP's own timeout, not a
// default. Explain watches the pin without refreshing it.
func TestAffinityPinExpires(t *testing.T) {
	// The pin table's clock ticks each second: a pin lives at least
	// timeout - 1s after its last use, time enough for the second
	// connection on a busy machine.
	const timeout = 3 * time.Second
	rt, vip := wiredRuntime(t, fmt.Sprintf("affinity_timeout = %q", timeout), "")
	addr := vip
	client := clientAddr(77, 0)
	first := askFrom(t, addr, client)
	if _, err := rt.SetOverride("w", first, l4.OverrideDrain, "test", true); err != nil {
		t.Fatal(err)
	}
	if again := askFrom(t, addr, client); again != first {
		t.Fatalf("pinned to %s, the next connection reached %s", first, again)
	}
	used := time.Now()
	if pins := affinityPins(t, rt, "w", "127.0.0.77"); len(pins) != 1 || pins[0].Backend.ID != first || pins[0].TimeoutSeconds != timeout.Seconds() {
		t.Fatalf("the pin after two connections: %+v", pins)
	}
	testutil.Eventually(t, 5*timeout, "the unused pin to expire", func() bool {
		return len(affinityPins(t, rt, "w", "127.0.0.77")) == 0
	})
	t.Logf("pin gone %v after its last use (affinity_timeout %v)", time.Since(used).Round(time.Millisecond), timeout)
	if next := askFrom(t, addr, client); next == first {
		t.Fatalf("after the pin expired the client still reached drained %s", first)
	}
}

// affinityPins returns the client address's affinity pins on the VIP, as
// explain reads them (without refreshing them).
func affinityPins(t *testing.T, rt *Runtime, vipName, client string) []plane.Pin {
	t.Helper()
	c, err := plane.ParseClient(client)
	if err != nil {
		t.Fatal(err)
	}
	e, err := rt.Explain(vipName, c)
	if err != nil {
		t.Fatal(err)
	}
	var out []plane.Pin
	for _, p := range e.Pinned {
		if p.Kind == "affinity" {
			out = append(out, p)
		}
	}
	return out
}
