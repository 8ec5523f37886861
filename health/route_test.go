// Routed checks: a check with a data plane's route connects to the
// route's address from its source, with its socket mark.

package health

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// TestRoutedCheck: the backend's own address refuses, the route's
// address (same port) listens: the routed check passes and its
// connection comes from the route's source; a failed routed check names
// the address it went to.
func TestRoutedCheck(t *testing.T) {
	testutil.RequirePriv(t, "SO_MARK needs CAP_NET_ADMIN")
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	from := make(chan netip.Addr, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			from <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
			c.Close()
		}
	}()
	port := addrOf(l).Port()
	backend := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port) // nothing listens there
	route := l4.ProbeRoute{Addr: netip.MustParseAddr("127.0.0.2"), Source: netip.MustParseAddr("127.0.0.3"), Mark: 0x4c4c0001}
	direct, err := NewChecker(Spec{Type: l4.CheckTCP, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res := direct.Check(context.Background(), backend); res.OK {
		t.Fatal("direct check passed against a closed port")
	}
	routed, err := NewChecker(Spec{Type: l4.CheckTCP, Timeout: 2 * time.Second, Route: route})
	if err != nil {
		t.Fatal(err)
	}
	if res := routed.Check(context.Background(), backend); !res.OK {
		t.Fatalf("routed check failed: %s", res.Reason)
	}
	if got := <-from; got != route.Source {
		t.Errorf("routed check came from %s, want %s", got, route.Source)
	}
	l.Close()
	res := routed.Check(context.Background(), backend)
	if res.OK || !strings.Contains(res.Reason, "connect refused (to the VIP 127.0.0.2:") {
		t.Errorf("failed routed check: %v %q", res.OK, res.Reason)
	}
}

// TestMarkControl: a routed dial's socket carries the route's mark.
func TestMarkControl(t *testing.T) {
	testutil.RequirePriv(t, "SO_MARK needs CAP_NET_ADMIN")
	l := listen(t)
	d := net.Dialer{Control: markControl(0x4c4c0102)}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var mark int
	var gerr error
	if err := rc.Control(func(fd uintptr) { mark, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if mark != 0x4c4c0102 {
		t.Errorf("mark %#x", mark)
	}
}

// TestLoopRoutedCheck: a routed tcp check on the probe loop connects to
// the route's address from its source (the backend's own address
// refuses); refused through the route, the reason names the VIP.
func TestLoopRoutedCheck(t *testing.T) {
	testutil.RequirePriv(t, "SO_MARK needs CAP_NET_ADMIN")
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	from := make(chan netip.Addr, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			from <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
			c.Close()
		}
	}()
	backend := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), addrOf(l).Port())
	route := l4.ProbeRoute{Addr: netip.MustParseAddr("127.0.0.2"), Source: netip.MustParseAddr("127.0.0.3"), Mark: 0x4c4c0001}
	m, rec := newManager(t)
	key := TargetKey{"vip", "routed"}
	spec := Spec{Type: l4.CheckTCP, Interval: 200 * time.Millisecond, Timeout: 150 * time.Millisecond, Rise: 1, Fall: 1, Route: route}
	if err := m.Set(key, backend, spec); err != nil {
		t.Fatal(err)
	}
	onLoop(t, m)
	rec.waitState(t, key, l4.HealthUp, 5*time.Second)
	if got := <-from; got != route.Source {
		t.Errorf("routed loop probe came from %s, want %s", got, route.Source)
	}
	l.Close()
	down := rec.waitState(t, key, l4.HealthDown, 5*time.Second)
	if want := "connect refused (to the VIP 127.0.0.2:"; !strings.HasPrefix(down.Reason, want) {
		t.Errorf("reason %q, want it to start %q", down.Reason, want)
	}
}
