package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// tlsPool runs a TLS server (TLS ends there, never at l4lb) that writes
// its label after the handshake, then echoes; it counts its connections.
func tlsPool(t *testing.T, cert tls.Certificate, label string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	addr := startServer(t, func(c *net.TCPConn) {
		conns.Add(1)
		tc := tls.Server(c, cfg)
		if tc.Handshake() != nil {
			return
		}
		tc.Write([]byte(label + "\n"))
		io.Copy(tc, tc)
	})
	return addr, &conns
}

// sniRig is a VIP whose own backend is a TLS server labelled "default",
// with routes to three more TLS pools.
type sniRig struct {
	ts     *testService
	routes []*Route
	conns  map[string]*atomic.Int64
}

func newSNIRig(t *testing.T, timeout time.Duration, noMatch NoRoute) *sniRig {
	t.Helper()
	cert, _ := testutil.SelfSignedTLS(t, "example.com")
	rig := &sniRig{conns: map[string]*atomic.Int64{}}
	def, n := tlsPool(t, cert, "default")
	rig.conns["default"] = n
	rig.ts = newService(t, Settings{}, def)
	names := [][]string{{"api.example.com"}, {"db.example.com", "db.example.net"}, {"*.example.com"}}
	for _, label := range []string{"api", "db", "wild"} {
		addr, n := tlsPool(t, cert, label)
		rig.conns[label] = n
		r := &Route{Name: label, Snapshots: &snapshot.Store{}}
		equalBackends(t, r.Snapshots, []netip.AddrPort{addr})
		rig.routes = append(rig.routes, r)
	}
	rt, err := NewRoutes(rig.routes, names, timeout, noMatch)
	if err != nil {
		t.Fatal(err)
	}
	rig.ts.SetRoutes(rt)
	return rig
}

// hello does a TLS handshake through the VIP with server name (none when
// empty) over conn, and returns the pool's label after checking an echo.
func hello(t *testing.T, conn net.Conn, name string) string {
	t.Helper()
	tc := tls.Client(conn, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake for %q through the VIP: %v", name, err)
	}
	buf := make([]byte, 64)
	n, err := tc.Read(buf)
	if err != nil {
		t.Fatalf("read the pool's label for %q: %v", name, err)
	}
	label := string(buf[:n-1])
	tc.Write([]byte("ping"))
	if _, err := io.ReadFull(tc, buf[:4]); err != nil || string(buf[:4]) != "ping" {
		t.Fatalf("echo through %q: %q, %v", name, buf[:4], err)
	}
	return label
}

// TestSNIRoutes: three names to three pools, a wildcard, exact beating
// wildcard, a name no route lists and a hello without a name going to
// the VIP's own backends; every handshake completes end to end, so the
// ClientHello reached each backend untouched.
func TestSNIRoutes(t *testing.T) {
	rig := newSNIRig(t, 5*time.Second, NoRouteDefault)
	for _, c := range []struct{ name, pool string }{
		{"api.example.com", "api"},
		{"DB.example.com", "db"},
		{"db.example.net", "db"},
		{"www.example.com", "wild"},
		{"a.b.example.com", "wild"},
		{"example.org", "default"},
		{"", "default"},
	} {
		if got := hello(t, rig.ts.dial(t), c.name); got != c.pool {
			t.Errorf("server name %q reached pool %q, want %q", c.name, got, c.pool)
		}
	}
	for i, want := range []uint64{1, 2, 2} {
		if n := rig.routes[i].Routed.Load(); n != want {
			t.Errorf("route %s routed %d, want %d", rig.routes[i].Name, n, want)
		}
	}
	st := &rig.ts.Stats
	if st.SNINoMatch.Load() != 2 || st.SNIDefault.Load() != 2 || st.SNINotTLS.Load() != 0 || st.SNITimeouts.Load() != 0 {
		t.Errorf("no match %d, default %d, not tls %d, timeouts %d; want 2, 2, 0, 0",
			st.SNINoMatch.Load(), st.SNIDefault.Load(), st.SNINotTLS.Load(), st.SNITimeouts.Load())
	}
}

// splitConn writes its first write (the ClientHello) in three pieces,
// pausing between them: three TCP segments (Go sets TCP_NODELAY).
type splitConn struct {
	net.Conn
	done bool
}

func (c *splitConn) Write(p []byte) (int, error) {
	if c.done || len(p) < 3 {
		return c.Conn.Write(p)
	}
	c.done = true
	cuts := []int{0, 7, len(p) / 2, len(p)}
	for i := range 3 {
		if _, err := c.Conn.Write(p[cuts[i]:cuts[i+1]]); err != nil {
			return 0, err
		}
		if i < 2 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return len(p), nil
}

// TestSNISplitHello: a ClientHello over three segments, 100 ms apart,
// waits for the last one and reaches its route.
func TestSNISplitHello(t *testing.T) {
	rig := newSNIRig(t, 5*time.Second, NoRouteClose)
	if got := hello(t, &splitConn{Conn: rig.ts.dial(t)}, "api.example.com"); got != "api" {
		t.Fatalf("split hello reached pool %q, want api", got)
	}
}

// TestSNINotTLS: a client that speaks plain text goes to the VIP's own
// backends byte-exact (default), or is reset with no backend dialed
// (close); counted either way.
func TestSNINotTLS(t *testing.T) {
	payload := []byte("GET / HTTP/1.0\r\n\r\n")
	t.Run("default", func(t *testing.T) {
		rig := newSNIRig(t, 5*time.Second, NoRouteDefault)
		addr, got, _ := recordServer(t)
		rig.ts.setBackends(t, addr)
		c := rig.ts.dial(t)
		c.Write(payload)
		c.CloseWrite()
		if b := readEnd(c); string(b) != "ok" {
			t.Fatalf("client read %q", b)
		}
		if b := within(t, got, "backend's bytes"); string(b) != string(payload) {
			t.Fatalf("backend got %q", b)
		}
		if n := rig.ts.Stats.SNINotTLS.Load(); n != 1 {
			t.Fatalf("not-TLS count %d, want 1", n)
		}
	})
	t.Run("close", func(t *testing.T) {
		rig := newSNIRig(t, 5*time.Second, NoRouteClose)
		c := rig.ts.dial(t)
		c.Write(payload)
		readReset(t, c, "plain-text client with sni_no_match close")
		if n := rig.ts.Stats.SNINotTLS.Load(); n != 1 {
			t.Fatalf("not-TLS count %d, want 1", n)
		}
		for label, n := range rig.conns {
			if n.Load() != 0 {
				t.Fatalf("pool %s dialed for a refused client", label)
			}
		}
		// No server name is refused the same way.
		tc := tls.Client(rig.ts.dial(t), &tls.Config{InsecureSkipVerify: true})
		if err := tc.Handshake(); err == nil {
			t.Fatal("a hello without SNI was routed with sni_no_match close")
		}
		testutil.Eventually(t, 2*time.Second, "no-SNI counted", func() bool { return rig.ts.Stats.SNINoMatch.Load() == 1 })
	})
}

// TestSNISilentClient: a client that sends nothing is reset after
// sni_timeout, counted, and no backend is dialed.
func TestSNISilentClient(t *testing.T) {
	const wait = 300 * time.Millisecond
	rig := newSNIRig(t, wait, NoRouteDefault)
	start := time.Now()
	c := rig.ts.dial(t)
	readReset(t, c, "silent client")
	if took := time.Since(start); took < wait || took > wait+2*time.Second {
		t.Fatalf("reset after %v, want about %v", took, wait)
	}
	testutil.Eventually(t, 2*time.Second, "timeout counted, connection ended", func() bool {
		return rig.ts.Stats.SNITimeouts.Load() == 1 && rig.ts.Stats.Active.Load() == 0
	})
	for label, n := range rig.conns {
		if n.Load() != 0 {
			t.Fatalf("pool %s dialed for a silent client", label)
		}
	}
}

// TestSNIConnectionAllocatesNothing: a connection routed by its
// ClientHello (peeked, parsed, looked up, dialed) allocates nothing on
// the loop, as a plain one does.
func TestSNIConnectionAllocatesNothing(t *testing.T) {
	var capt captureConn
	_ = tls.Client(&capt, &tls.Config{ServerName: "API.example.com"}).Handshake()
	hello := capt.b
	pipes := NewPipePool(0)
	ts := newServiceOn(t, pipes, newLoopsForTest(t, 1, pipes), Settings{}, rawEchoServer(t))
	r := &Route{Name: "api", Snapshots: &snapshot.Store{}}
	equalBackends(t, r.Snapshots, []netip.AddrPort{rawHelloServer(t, len(hello))})
	rt, err := NewRoutes([]*Route{r}, [][]string{{"*.example.com"}}, 5*time.Second, NoRouteClose)
	if err != nil {
		t.Fatal(err)
	}
	ts.SetRoutes(rt)
	routedConnsAllocateNothing(t, ts, hello, r)
}

// routedConnsAllocateNothing opens connections to ts that send first and
// read "ok" (a rawHelloServer behind route r), and fails when they
// allocate on the loop or r did not route each.
func routedConnsAllocateNothing(t *testing.T, ts *testService, first []byte, r *Route) {
	t.Helper()
	vip := &unix.SockaddrInet4{Port: int(ts.addr.Port()), Addr: ts.addr.Addr().As4()}
	got := make([]byte, 64)
	conn := func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		rawDeadline(fd)
		defer unix.Close(fd)
		if err := unix.Connect(fd, vip); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(fd, first); err != nil {
			t.Fatal(err)
		}
		n, err := readBlocking(fd, got)
		if err != nil || string(got[:n]) != "ok" {
			t.Fatalf("echo %d bytes, %v (not tls %d, no match %d, startup malformed %d)", n, err,
				ts.Stats.SNINotTLS.Load(), ts.Stats.SNINoMatch.Load(), ts.Stats.Startup.Malformed.Load())
		}
	}
	for range warmConns {
		conn()
	}
	const n = 1000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		conn()
	}
	runtime.ReadMemStats(&after)
	t.Logf("%d allocations for %d routed connections", after.Mallocs-before.Mallocs, n)
	if a := after.Mallocs - before.Mallocs; a > n/50 {
		t.Fatalf("%d allocations for %d connections", a, n)
	}
	if r.Routed.Load() != warmConns+n {
		t.Fatalf("routed %d, want %d", r.Routed.Load(), warmConns+n)
	}
}

// captureConn keeps what a TLS client writes; its reads end the
// handshake after the ClientHello.
type captureConn struct {
	net.Conn
	b []byte
}

func (c *captureConn) Write(p []byte) (int, error) { c.b = append(c.b, p...); return len(p), nil }
func (c *captureConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (c *captureConn) Close() error                { return nil }

// rawHelloServer is a loopback backend that reads want bytes (a whole
// ClientHello, or it never answers), answers "ok" and closes; raw
// syscalls and one buffer, so that it allocates nothing per connection.
func rawHelloServer(t *testing.T, want int) netip.AddrPort {
	t.Helper()
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 128); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf, ok := make([]byte, 64<<10), []byte("ok")
		for {
			fd, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(lfd), 0, 0, unix.SOCK_CLOEXEC, 0, 0)
			if errno == unix.EINTR {
				continue
			}
			if errno != 0 {
				return // shut down
			}
			rawDeadline(int(fd))
			got := 0
			for got < want {
				n, err := rawRead(int(fd), buf)
				if err != nil || n <= 0 {
					break
				}
				got += n
			}
			if got == want {
				unix.Write(int(fd), ok)
			}
			unix.Close(int(fd))
		}
	}()
	t.Cleanup(func() {
		unix.Shutdown(lfd, unix.SHUT_RDWR)
		<-done
		unix.Close(lfd)
	})
	return sockaddrAddrPort(sa)
}

// TestSNIAfterProxyHeader: behind another balancer, the ClientHello is
// read after the PROXY header (consumed) and routed; an oversized hello
// (a 64 KiB handshake message) is not TLS to route by.
func TestSNIAfterProxyHeader(t *testing.T) {
	rig := newSNIRig(t, 5*time.Second, NoRouteClose)
	rig.ts.Update(Settings{AcceptProxy: AcceptProxyV1, AcceptProxyFrom: loopback})
	c := rig.ts.dial(t)
	c.Write([]byte("PROXY TCP4 203.0.113.7 198.18.0.10 40001 443\r\n"))
	if got := hello(t, c, "db.example.net"); got != "db" {
		t.Fatalf("hello after a PROXY header reached %q, want db", got)
	}
	big := rig.ts.dial(t)
	big.Write([]byte("PROXY TCP4 203.0.113.7 198.18.0.10 40002 443\r\n"))
	big.Write([]byte{0x16, 3, 1, 0x40, 0, 1, 1, 0, 0}) // handshake of 64 KiB
	start := time.Now()
	readReset(t, big, "an oversized ClientHello with sni_no_match close")
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("an oversized hello was reset after %v: refused only at sni_timeout", took)
	}
	if n := rig.ts.Stats.SNINotTLS.Load(); n != 1 {
		t.Fatalf("not-TLS count %d, want 1", n)
	}
}
