package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// TestBulkBothWays sends 64 MiB of random bytes each way at once and
// compares checksums on the far side: spliced, and copied through user
// space when max_pipes are all in use.
func TestBulkBothWays(t *testing.T) {
	t.Run("splice", func(t *testing.T) {
		ts := bulkBothWays(t, nil)
		if n := ts.Stats.PipelessCopies.Load(); n != 0 {
			t.Fatalf("%d chunks copied without a pipe", n)
		}
	})
	t.Run("max_pipes reached", func(t *testing.T) {
		ts := bulkBothWays(t, func(ts *testService) {
			held, err := ts.pipes.get(0) // the one pipe max_pipes allows
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ts.pipes.put(0, held) })
			ts.pipes.SetMax(1)
		})
		if n := ts.Stats.PipelessCopies.Load(); n == 0 {
			t.Fatal("no chunk was copied without a pipe")
		}
		if n := ts.Stats.LocalErrors.Load(); n != 0 {
			t.Fatalf("the pipe cap counted as %d local resource errors", n)
		}
		if open := ts.pipes.Open(); open > 1 {
			t.Fatalf("%d pipes open under max_pipes = 1", open)
		}
	})
}

func bulkBothWays(t *testing.T, setup func(*testService)) *testService {
	const size = 64 << 20
	fromBackend := make(chan [32]byte, 1)
	backendSent := make(chan [32]byte, 1)
	addr := startServer(t, func(c *net.TCPConn) {
		sent := make(chan struct{})
		go func() { backendSent <- sendRandom(c, size); c.CloseWrite(); close(sent) }()
		h := sha256.New()
		io.Copy(h, c)
		fromBackend <- [32]byte(h.Sum(nil))
		<-sent // the socket closes when the handler returns
	})
	ts := newService(t, Settings{Name: "bulk"}, addr)
	if setup != nil {
		setup(ts)
	}
	c := ts.dial(t)
	clientSent := make(chan [32]byte, 1)
	go func() { clientSent <- sendRandom(c, size); c.CloseWrite() }()
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil || n != size {
		t.Fatalf("client read %d bytes, err %v", n, err)
	}
	if got, want := [32]byte(h.Sum(nil)), within(t, backendSent, "the backend's send"); got != want {
		t.Fatal("backend to client bytes differ")
	}
	if got, want := within(t, fromBackend, "the backend's read"), within(t, clientSent, "the client's send"); got != want {
		t.Fatal("client to backend bytes differ")
	}
	b := ts.backends[0]
	if in, out := b.Stats.BytesIn.Load(), b.Stats.BytesOut.Load(); in != size || out != size {
		t.Fatalf("moved %d in, %d out; want %d each", in, out, size)
	}
	return ts
}

func sendRandom(w io.Writer, n int64) [32]byte {
	h := sha256.New()
	io.Copy(io.MultiWriter(w, h), io.LimitReader(rand.Reader, n))
	return [32]byte(h.Sum(nil))
}

// TestHalfClose: the client shuts its write side, the backend reads EOF and
// only then replies; the client receives the whole reply.
func TestHalfClose(t *testing.T) {
	reply := bytes.Repeat([]byte("reply after EOF "), 100000)
	addr := startServer(t, func(c *net.TCPConn) {
		req, _ := io.ReadAll(c) // until the client's FIN
		c.Write(append([]byte(nil), req...))
		c.Write(reply)
	})
	ts := newService(t, Settings{}, addr)
	c := ts.dial(t)
	c.Write([]byte("request"))
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte("request"), reply...)
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d", len(got), len(want))
	}
}

// TestBackendHalfClose: the backend shuts its write side first (a server
// that announces the end), the client can still send and be heard.
func TestBackendHalfClose(t *testing.T) {
	got := make(chan string, 1)
	addr := startServer(t, func(c *net.TCPConn) {
		c.Write([]byte("bye"))
		c.CloseWrite()
		b, _ := io.ReadAll(c)
		got <- string(b)
	})
	ts := newService(t, Settings{}, addr)
	c := ts.dial(t)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "bye" {
		t.Fatalf("read %q, %v", b, err)
	}
	c.Write([]byte("still talking"))
	c.CloseWrite()
	if s := within(t, got, "the backend's read"); s != "still talking" {
		t.Fatalf("backend got %q", s)
	}
}

// TestRefusedBackendIsRetried: the first pick is a dead address; the client
// never notices.
func TestRefusedBackendIsRetried(t *testing.T) {
	live := startServer(t, echoHandler)
	ts := newService(t, Settings{Retries: 2}, testutil.FreeTCPAddr(t), live)
	for i := 0; i < 6; i++ {
		c := ts.dial(t)
		c.Write([]byte("ping"))
		buf := make([]byte, 4)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("connection %d: %q, %v", i, buf, err)
		}
		c.Close()
	}
	if ts.backends[0].Stats.ConnectFails.Load() == 0 {
		t.Fatal("the dead backend was never tried")
	}
	if r, f := ts.Stats.Retries.Load(), ts.backends[0].Stats.ConnectFails.Load(); r != f {
		t.Fatalf("%d retries after %d failed connects: each failure is retried once", r, f)
	}
	if ts.Stats.NoBackend.Load() != 0 {
		t.Fatal("a client was turned away")
	}
}

func TestAllBackendsDownClosesClientPromptly(t *testing.T) {
	ts := newService(t, Settings{Retries: 3}, testutil.FreeTCPAddr(t), testutil.FreeTCPAddr(t))
	start := time.Now()
	c, err := net.DialTimeout("tcp4", ts.addr.String(), 2*time.Second)
	if err == nil { // else the reset beat the end of connect: closed promptly too
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	// The connect may fail only if the reset beat its completion (then
	// the dial's error is the reset too); a FIN would be an EOF here.
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v, want the connection reset", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("closed after %v", d)
	}
	if ts.Stats.NoBackend.Load() != 1 {
		t.Fatalf("NoBackend = %d", ts.Stats.NoBackend.Load())
	}
}

func TestIdleTimeoutClosesQuietConnection(t *testing.T) {
	addr := startServer(t, echoHandler)
	ts := newService(t, Settings{IdleTimeout: time.Second}, addr)
	c := ts.dial(t)
	// Activity keeps it open past the timeout (every 200 ms: a margin for
	// a busy machine, now that a failed echo fails the test)...
	var start time.Time
	for i := 0; i < 6; i++ {
		time.Sleep(200 * time.Millisecond)
		echoOnce(t, c, "x")
		start = time.Now()
	}
	// ...silence closes it.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if err != io.EOF {
		t.Fatalf("read: %v, want EOF from idle close", err)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("idle close after %v, want about 1s", d)
	}
	testutil.Eventually(t, time.Second, "the idle close counted", func() bool { return ts.Stats.IdleClosed.Load() == 1 })
	time.Sleep(50 * time.Millisecond)
	if n := ts.Stats.IdleClosed.Load(); n != 1 {
		t.Fatalf("IdleClosed = %d, want 1", n)
	}
}

// TestMaxConnsQueues: at the limit a new client waits in the backlog and is
// served as soon as a slot frees.
func TestMaxConnsQueues(t *testing.T) {
	addr := startServer(t, echoHandler)
	ts := newService(t, Settings{MaxConns: 2}, addr)
	c1, c2 := ts.dial(t), ts.dial(t)
	for _, c := range []*net.TCPConn{c1, c2} {
		echoOnce(t, c, "a")
	}
	c3 := ts.dial(t) // completes in the kernel backlog
	c3.Write([]byte("b"))
	c3.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c3.Read(make([]byte, 1)); !os.IsTimeout(err) {
		t.Fatalf("third connection served over the limit: %v", err)
	}
	c1.Close()
	c3.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c3, make([]byte, 1)); err != nil {
		t.Fatalf("queued connection not served after a slot freed: %v", err)
	}
}

// TestMaxConnsRaisedResumes: a reload that raises max_conns serves the
// client waiting in the backlog at once, though no connection ended.
func TestMaxConnsRaisedResumes(t *testing.T) {
	addr := startServer(t, echoHandler)
	ts := newService(t, Settings{MaxConns: 1}, addr)
	c1 := ts.dial(t)
	echoOnce(t, c1, "a")
	c2 := ts.dial(t)
	c2.Write([]byte("b"))
	c2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c2.Read(make([]byte, 1)); !os.IsTimeout(err) {
		t.Fatalf("second connection served over the limit: %v", err)
	}
	ts.Update(Settings{MaxConns: 2})
	c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c2, make([]byte, 1)); err != nil {
		t.Fatalf("queued connection not served after max_conns was raised: %v", err)
	}
}

// TestBudgetFreedByAnotherVIPResumes: with the process-wide budget used up
// by one VIP, another VIP's client waits in its backlog; the first VIP's
// connection ending serves it.
func TestBudgetFreedByAnotherVIPResumes(t *testing.T) {
	addr := startServer(t, echoHandler)
	budget := NewConnBudget(1)
	pipes := NewPipePool(0)
	loops := testLoops(t, pipes)
	var svcs [2]*testService
	for i := range svcs {
		ln, err := ListenTCP(netip.MustParseAddrPort("127.0.0.1:0"), ListenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ts := &testService{store: &snapshot.Store{}, pipes: pipes, addr: ln.Addr().(*net.TCPAddr).AddrPort()}
		ts.setBackends(t, addr)
		if ts.TCPService, err = NewTCPService(TCPConfig{Listener: ln, Snapshots: ts.store, Pipes: pipes, Budget: budget, Loops: loops}); err != nil {
			t.Fatal(err)
		}
		go ts.Serve()
		t.Cleanup(func() { ts.Drain(context.Background()) })
		svcs[i] = ts
	}
	a := svcs[0].dial(t)
	echoOnce(t, a, "a")
	b := svcs[1].dial(t)
	b.Write([]byte("b"))
	b.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := b.Read(make([]byte, 1)); !os.IsTimeout(err) {
		t.Fatalf("served over the process budget: %v", err)
	}
	a.Close()
	b.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(b, make([]byte, 1)); err != nil {
		t.Fatalf("waiting client not served after another VIP freed the budget: %v", err)
	}
}

// TestIdleConnectionsHoldNoPipe: while connections sit idle no pipe is
// lent, so an idle connection costs its two sockets only.
func TestIdleConnectionsHoldNoPipe(t *testing.T) {
	addr := startServer(t, echoHandler)
	ts := newService(t, Settings{}, addr)
	var conns []*net.TCPConn
	for i := 0; i < 50; i++ {
		c := ts.dial(t)
		echoOnce(t, c, "hi")
		conns = append(conns, c)
	}
	testutil.Eventually(t, 2*time.Second, "pipes returned", func() bool { return ts.pipes.Lent() == 0 })
	if n := ts.Conns(); n != 50 {
		t.Fatalf("%d connections tracked, want 50", n)
	}
	if open := ts.pipes.Open(); open > pipeShards+2 { // at most one per free list
		t.Fatalf("%d pipes opened for 50 sequential exchanges", open)
	}
	ts.pipes.Close() // closes what is pooled; a pipe held by a connection would stay open
	if open := ts.pipes.Open(); open != 0 {
		t.Fatalf("%d pipes still open with only idle connections", open)
	}
}

// namedServer writes name to every connection and closes it.
func namedServer(t testing.TB, name string) netip.AddrPort {
	return startServer(t, func(c *net.TCPConn) { c.Write([]byte(name)) })
}

func (ts *testService) backendName(t *testing.T) string {
	t.Helper()
	c := ts.dial(t)
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAffinityPinsClient: with affinity a client's reconnects stay on one
// backend although round robin would rotate; when that backend becomes
// ineligible they move, and stay on the new one.
func TestAffinityPinsClient(t *testing.T) {
	ts := newService(t, Settings{AffinityTimeout: time.Minute},
		namedServer(t, "b0"), namedServer(t, "b1"), namedServer(t, "b2"))
	first := ts.backendName(t)
	for i := 0; i < 6; i++ {
		if got := ts.backendName(t); got != first {
			t.Fatalf("reconnect %d went to %s, pinned to %s", i, got, first)
		}
	}
	// What the runtime does when a backend goes down: flag it and publish
	// a snapshot without it.
	var ms []balance.Member
	for _, b := range ts.backends {
		if string(b.ID) == first {
			b.SetEligible(false)
		} else {
			ms = append(ms, balance.Member{Backend: b, Weight: 1})
		}
	}
	snap, err := snapshot.Build(balance.Options{}, ms)
	if err != nil {
		t.Fatal(err)
	}
	ts.store.Store(snap)
	moved := ts.backendName(t)
	if moved == first {
		t.Fatalf("still on ineligible %s", first)
	}
	for i := 0; i < 4; i++ {
		if got := ts.backendName(t); got != moved {
			t.Fatalf("after the move, reconnect went to %s, want %s", got, moved)
		}
	}
}

// TestAcceptedSocketsInheritKeepAlive: keepalive set on the listener
// reaches accepted sockets without per-connection setsockopt calls.
func TestAcceptedSocketsInheritKeepAlive(t *testing.T) {
	ln, err := ListenTCP(netip.MustParseAddrPort("127.0.0.1:0"), ListenOptions{KeepAlive: keepAliveConfig(45 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, _ := c.SyscallConn()
	var on, idle int
	raw.Control(func(fd uintptr) {
		on, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		idle, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	})
	if on != 1 || idle != 45 {
		t.Fatalf("accepted socket: SO_KEEPALIVE %d, TCP_KEEPIDLE %d; want 1 and 45", on, idle)
	}
}

// TestNoPipeLeaks: after many complete connections, each of which
// carried its own payload both ways byte for byte (small ones copied,
// bulk ones spliced through pipes), every pipe is back in the pool (none
// lent), and the pool holds no more than it may keep. A proxy that lost
// or changed bytes would fail here, not just one that leaked pipes.
func TestNoPipeLeaks(t *testing.T) {
	addr := startServer(t, func(c *net.TCPConn) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.Copy(c, c)
	})
	pipes := NewPipePool(0)
	// Registered before the loops and the service: runs after the service
	// drained and the loops gave their own free pipes back to the pool.
	t.Cleanup(func() {
		pipes.Close()
		if open := pipes.Open(); open != 0 {
			t.Errorf("%d pipes leaked", open)
		}
	})
	ts := newServiceOn(t, pipes, testLoops(t, pipes), Settings{}, addr)
	rng := mrand.New(mrand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		size := 1 + rng.IntN(64)
		if i%3 == 0 {
			size = 64<<10 + rng.IntN(64<<10) // bulk: spliced
		}
		payload := make([]byte, size)
		for j := range payload {
			payload[j] = byte(rng.Uint32())
		}
		if err := echoAll(ts.dial(t), payload); err != nil {
			t.Fatalf("connection %d (%d bytes): %v", i, size, err)
		}
	}
	if ts.spliced.Load() == 0 {
		t.Fatal("no byte moved by splice: the pipes were never used")
	}
	testutil.Eventually(t, 2*time.Second, "connections to end", func() bool { return ts.Conns() == 0 })
	if lent, open := ts.pipes.Lent(), ts.pipes.Open(); lent != 0 || open > maxIdlePipes {
		t.Fatalf("after 300 connections: %d pipes lent, %d open", lent, open)
	}
}

// echoAll sends payload on c (then its FIN) while reading the echo, and
// fails unless exactly payload came back before the backend's FIN. It
// closes c.
func echoAll(c *net.TCPConn, payload []byte) error {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		if err == nil {
			err = c.CloseWrite()
		}
		werr <- err
	}()
	got, rerr := io.ReadAll(c)
	if err := <-werr; err != nil { // bounded: the write ends by c's deadline
		return fmt.Errorf("write: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("read after %d bytes: %w", len(got), rerr)
	}
	if !bytes.Equal(got, payload) {
		return fmt.Errorf("echo of %d bytes came back as %d bytes, or changed", len(payload), len(got))
	}
	return nil
}

func TestLocalFailure(t *testing.T) {
	for _, tc := range []struct {
		err   error
		local bool
	}{
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("socket", syscall.EMFILE)}, true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)}, true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, false},
		{os.ErrDeadlineExceeded, false},
	} {
		if got := localFailure(tc.err); got != tc.local {
			t.Errorf("localFailure(%v) = %v", tc.err, got)
		}
	}
}

// TestIPv6VIP proxies over IPv6 loopback.
func TestIPv6VIP(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("no IPv6 loopback: %v", err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			io.Copy(c, c)
		}
	}()
	vipLn, err := ListenTCP(netip.MustParseAddrPort("[::1]:0"), ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := &snapshot.Store{}
	b := l4.NewBackend("v6", ln.Addr().(*net.TCPAddr).AddrPort(), nil)
	snap, _ := snapshot.Build(balance.Options{}, []balance.Member{{Backend: b, Weight: 1}})
	store.Store(snap)
	pipes := NewPipePool(0)
	svc, err := NewTCPService(TCPConfig{Listener: vipLn, Snapshots: store, Pipes: pipes, Loops: testLoops(t, pipes)})
	if err != nil {
		t.Fatal(err)
	}
	go svc.Serve()
	defer svc.Close()
	c, err := net.Dial("tcp6", vipLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("v6"))
	buf := make([]byte, 2)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "v6" {
		t.Fatalf("echo over IPv6: %q, %v", buf, err)
	}
}

// TestFreebind: a VIP listens on an address no interface has yet (inside a
// fresh namespace), and serves once the address is added.
func TestFreebind(t *testing.T) {
	ns := testutil.NewNetns(t, "fb")
	ns.MustDo(t, func() error {
		_, errTCP := ListenTCP(netip.MustParseAddrPort("198.18.77.1:8080"), ListenOptions{})
		_, errUDP := ListenUDP(netip.MustParseAddrPort("198.18.77.1:8080"), ListenOptions{})
		if !errors.Is(errTCP, unix.EADDRNOTAVAIL) || !errors.Is(errUDP, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("without freebind, a missing address: tcp %v, udp %v; want EADDRNOTAVAIL", errTCP, errUDP)
		}
		return nil
	})
	var ln *net.TCPListener
	ns.MustDo(t, func() (err error) {
		ln, err = ListenTCP(netip.MustParseAddrPort("198.18.77.1:8080"), ListenOptions{Freebind: true})
		return err
	})
	defer ln.Close()
	ns.MustExec(t, "ip", "addr", "add", "198.18.77.1/32", "dev", "lo")
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	ns.MustDo(t, func() error {
		c, err := net.DialTimeout("tcp4", "198.18.77.1:8080", 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(waitBound))
		b, err := io.ReadAll(c)
		if string(b) != "ok" {
			return fmt.Errorf("read %q, %v", b, err)
		}
		return nil
	})
}
