package proxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/guard"
)

// countingEcho is an echo backend that counts the connections it accepts.
func countingEcho(t *testing.T) (netip.AddrPort, *atomic.Int64) {
	var n atomic.Int64
	addr := startServer(t, func(c *net.TCPConn) {
		n.Add(1)
		io.Copy(c, c)
	})
	return addr, &n
}

// dialFrom connects to the VIP from a loopback source address.
func dialSrc(t *testing.T, src string, vip netip.AddrPort) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp4", vip.String())
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// echoTrip reports whether msg comes back from the echo behind the VIP;
// else the error the client saw.
func echoTrip(c *net.TCPConn, msg string) error {
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return errors.New("echo mismatch: " + string(buf))
	}
	return nil
}

// attempt opens a connection from src and round-trips msg on it: nil, or
// the error the client saw (a reset may already fail the connect).
func attempt(src string, vip netip.AddrPort, msg string) error {
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp4", vip.String())
	if err != nil {
		return err
	}
	defer c.Close()
	return echoTrip(c.(*net.TCPConn), msg)
}

// wantRST asserts the VIP resets a connection from src (not a FIN, not a
// timeout).
func wantRST(t *testing.T, src string, vip netip.AddrPort, what string) {
	t.Helper()
	if err := attempt(src, vip, "x"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: got %v, want ECONNRESET", what, err)
	}
}

func mustACL(t *testing.T, allow, deny []string) *guard.ACL {
	t.Helper()
	var a, d []netip.Prefix
	for _, s := range allow {
		a = append(a, netip.MustParsePrefix(s))
	}
	for _, s := range deny {
		d = append(d, netip.MustParsePrefix(s))
	}
	acl, err := guard.NewACL(a, d)
	if err != nil {
		t.Fatal(err)
	}
	return acl
}

// TestAccessListTCP: a denied client is reset before any backend is
// dialed; an allowed one is proxied; a reload's new list applies to new
// connections and leaves open ones alone.
func TestAccessListTCP(t *testing.T) {
	be, accepted := countingEcho(t)
	ts := newService(t, Settings{Access: mustACL(t, []string{"127.0.0.0/8"}, []string{"127.0.0.66/32"})}, be)

	open := dialSrc(t, "127.0.0.2", ts.addr)
	if err := echoTrip(open, "allowed"); err != nil {
		t.Fatalf("allowed client: %v", err)
	}
	wantRST(t, "127.0.0.66", ts.addr, "denied client")
	if got := ts.Stats.Denied.Load(); got != 1 {
		t.Errorf("Denied = %d, want 1", got)
	}
	if got := accepted.Load(); got != 1 {
		t.Errorf("backend accepted %d connections, want 1 (the denied client must cost no backend connection)", got)
	}

	// A reload denies 127.0.0.2 and lets 127.0.0.66 in.
	ts.Update(Settings{Access: mustACL(t, []string{"127.0.0.0/8"}, []string{"127.0.0.2/32"})})
	if err := attempt("127.0.0.66", ts.addr, "now allowed"); err != nil {
		t.Fatalf("client allowed by the reload: %v", err)
	}
	wantRST(t, "127.0.0.2", ts.addr, "client denied by the reload")
	if err := echoTrip(open, "still open"); err != nil {
		t.Fatalf("connection open before the reload: %v", err)
	}
}

// TestMaxConnsPerClient: a client at its limit is reset; others are not;
// a closed connection frees its slot.
func TestMaxConnsPerClient(t *testing.T) {
	be, _ := countingEcho(t)
	ts := newService(t, Settings{ClientLimits: guard.Limits{MaxOpen: 2}}, be)
	a1, a2 := dialSrc(t, "127.0.0.3", ts.addr), dialSrc(t, "127.0.0.3", ts.addr)
	for _, c := range []*net.TCPConn{a1, a2} {
		if err := echoTrip(c, "held"); err != nil {
			t.Fatalf("connection within the limit: %v", err)
		}
	}
	wantRST(t, "127.0.0.3", ts.addr, "third connection of a client limited to 2")
	if err := attempt("127.0.0.4", ts.addr, "other"); err != nil {
		t.Fatalf("another client: %v", err)
	}
	if got := ts.Stats.ClientLimited.Load(); got != 1 {
		t.Errorf("ClientLimited = %d, want 1", got)
	}
	a1.Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := attempt("127.0.0.3", ts.addr, "freed")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing one of its connections the client is still refused: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConnRatePerClient: a burst over the rate is reset beyond one
// second's worth; another client is unaffected.
func TestConnRatePerClient(t *testing.T) {
	be, _ := countingEcho(t)
	ts := newService(t, Settings{ClientLimits: guard.Limits{Rate: 5}}, be)
	ok, reset := 0, 0
	for range 12 {
		switch err := attempt("127.0.0.5", ts.addr, "r"); {
		case err == nil:
			ok++
		case errors.Is(err, syscall.ECONNRESET):
			reset++
		default:
			t.Fatalf("neither proxied nor reset: %v", err)
		}
	}
	// 5 in the burst, plus one per 200 ms the loop took.
	if ok < 5 || ok > 8 || reset < 4 {
		t.Errorf("12 connections at once with conn_rate_per_client 5: %d proxied, %d reset", ok, reset)
	}
	if err := attempt("127.0.0.6", ts.addr, "other"); err != nil {
		t.Fatalf("another client: %v", err)
	}
	if got := ts.Stats.ClientLimited.Load(); got != uint64(reset) {
		t.Errorf("ClientLimited = %d, want %d", got, reset)
	}
}

// udpFrom is a UDP client bound to a loopback source address.
func udpSrc(t *testing.T, src string, vip netip.AddrPort) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)}, net.UDPAddrFromAddrPort(vip))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAccessListUDP: a denied client's datagrams are dropped and counted,
// and start no session.
func TestAccessListUDP(t *testing.T) {
	be := udpEcho(t, "b")
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{Access: mustACL(t, nil, []string{"127.0.0.66/32"})}, be)
	if _, err := exchange(t, udpSrc(t, "127.0.0.2", ts.addr), []byte("hi")); err != nil {
		t.Fatalf("allowed client: %v", err)
	}
	denied := udpSrc(t, "127.0.0.66", ts.addr)
	for range 3 {
		if reply, err := exchange(t, denied, []byte("hi")); err == nil {
			t.Fatalf("denied client got a reply %q", reply)
		}
	}
	if got := ts.Stats.Denied.Load(); got != 3 {
		t.Errorf("Denied = %d, want 3", got)
	}
	if got := ts.Sessions(); got != 1 {
		t.Errorf("%d sessions, want 1", got)
	}
}

// TestMaxSessionsPerClient: a client at its session limit starts no new
// session (its other ports' datagrams are dropped) while its open ones and
// other clients go on.
func TestMaxSessionsPerClient(t *testing.T) {
	be := udpEcho(t, "b")
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Second, ClientLimits: guard.Limits{MaxOpen: 2}}, be)
	s1, s2 := udpSrc(t, "127.0.0.7", ts.addr), udpSrc(t, "127.0.0.7", ts.addr)
	for _, c := range []*net.UDPConn{s1, s2} {
		if _, err := exchange(t, c, []byte("a")); err != nil {
			t.Fatalf("session within the limit: %v", err)
		}
	}
	if reply, err := exchange(t, udpSrc(t, "127.0.0.7", ts.addr), []byte("c")); err == nil {
		t.Fatalf("third session of a client limited to 2 got a reply %q", reply)
	}
	if got := ts.Stats.ClientLimited.Load(); got != 1 {
		t.Errorf("ClientLimited = %d, want 1", got)
	}
	if _, err := exchange(t, s1, []byte("again")); err != nil {
		t.Fatalf("an open session of the limited client: %v", err)
	}
	if _, err := exchange(t, udpSrc(t, "127.0.0.8", ts.addr), []byte("o")); err != nil {
		t.Fatalf("another client: %v", err)
	}
	// Sessions that end (session_timeout) free the client's slots.
	testutil.Eventually(t, 5*time.Second, "every session to time out", func() bool { return ts.Sessions() == 0 })
	if _, err := exchange(t, udpSrc(t, "127.0.0.7", ts.addr), []byte("freed")); err != nil {
		t.Fatalf("after its sessions ended the client is still refused: %v", err)
	}
}

// TestUDPRefusedClientsAllocateNothing: a flood of datagrams from denied
// and over-limit clients costs no allocation per datagram.
func TestUDPRefusedClientsAllocateNothing(t *testing.T) {
	be := udpEcho(t, "b")
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Minute,
		Access: mustACL(t, nil, []string{"127.0.0.66/32"}), ClientLimits: guard.Limits{MaxOpen: 1}}, be)
	if _, err := exchange(t, udpSrc(t, "127.0.0.9", ts.addr), []byte("held")); err != nil {
		t.Fatal(err)
	}
	denied, limited := udpSrc(t, "127.0.0.66", ts.addr), udpSrc(t, "127.0.0.9", ts.addr)
	payload := []byte("flood")
	const n = 4000
	refused := func() uint64 { return ts.Stats.Denied.Load() + ts.Stats.ClientLimited.Load() }
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		c := denied
		if i%2 == 1 {
			c = limited
		}
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
		if i%64 == 63 { // stay below the socket buffers
			deadline := time.Now().Add(5 * time.Second)
			for refused() < uint64(i) && time.Now().Before(deadline) {
				runtime.Gosched()
			}
		}
	}
	testutil.Eventually(t, 5*time.Second, "every datagram counted as refused", func() bool { return refused() >= n })
	runtime.ReadMemStats(&after)
	if got := after.Mallocs - before.Mallocs; got > n/100 {
		t.Fatalf("%d allocations for %d refused datagrams", got, n)
	}
	if d, l := ts.Stats.Denied.Load(), ts.Stats.ClientLimited.Load(); d != n/2 || l != n/2 {
		t.Errorf("denied %d, client-limited %d; want %d each", d, l, n/2)
	}
}
