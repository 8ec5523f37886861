// A UDP backend with passive health only (type none): after its mark
// expires it is on trial, not up, and stays down while it is still dead.

package reconcile

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

func TestUDPPassiveTrial(t *testing.T) {
	vipAddr, beAddr := testutil.FreeTCPAddr(t), testutil.FreeTCPAddr(t) // as UDP ports: nothing listens there yet
	rt := startRuntime(t, fmt.Sprintf(`
[global]
admin_socket = "off"
[[vip]]
name = "u"
protocol = "udp"
listen = %q
  [vip.health]
  type = "none"
  fail_timeout = "1s"
  [[vip.backend]]
  name = "be"
  address = %q
`, vipAddr, beAddr))
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(vipAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func() {
		t.Helper()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
	}
	isDown := func(b plane.BackendStatus) bool { return b.Health == "down" }
	onTrial := func(b plane.BackendStatus) bool { return b.Health == "unknown" && b.Trial }

	send() // the backend port answers ICMP port unreachable: a passive mark
	waitBackend(t, rt, "u", "be", 2*time.Second, "down", isDown)
	waitBackend(t, rt, "u", "be", 3*time.Second, "on trial after fail_timeout", onTrial)

	// Still dead: the next datagram fails and takes it down again at once,
	// instead of it showing as up.
	send()
	waitBackend(t, rt, "u", "be", 2*time.Second, "down again", func(b plane.BackendStatus) bool {
		return isDown(b) && b.Reason == "passive: failed again while on trial"
	})

	// Alive again: on trial, a reply brings it up.
	srv, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(beAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go testutil.ServeDatagrams(srv, func(payload []byte) []byte { return payload })
	waitBackend(t, rt, "u", "be", 3*time.Second, "on trial", onTrial)
	send()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("reply %q, %v", buf[:n], err)
	}
	waitBackend(t, rt, "u", "be", 2*time.Second, "up after a reply", func(b plane.BackendStatus) bool { return b.Health == "up" && !b.Trial })
}
