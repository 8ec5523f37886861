package proxy

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

// newLoopsForTest starts n loops, closed when the test ends (after the
// services on them: cleanups run last registered first).
func newLoopsForTest(t *testing.T, n int, pipes *PipePool) *Loops {
	t.Helper()
	ls, err := NewLoops(n, pipes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	return ls
}

// block holds loop l busy (as a saturated loop is) until the returned
// function is called.
func block(t *testing.T, l *loop) (release func()) {
	t.Helper()
	held, free := make(chan struct{}), make(chan struct{})
	l.post(func() { close(held); <-free })
	within(t, held, "the loop to run the blocking function")
	released := false
	release = func() {
		if !released {
			released = true
			close(free)
		}
	}
	t.Cleanup(release)
	return release
}

// echoOnce sends msg and expects it back within a second.
func echoOnce(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(time.Second))
	defer c.SetDeadline(time.Now().Add(waitBound)) // back to the backstop
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo %q: got %q, %v", msg, got, err)
	}
}

// TestSaturatedLoopDoesNotStarveAccepts: while one loop is held busy, new
// connections are accepted and served by the other, which takes them all
// (none is handed to the busy loop, however many the free one holds).
func TestSaturatedLoopDoesNotStarveAccepts(t *testing.T) {
	pipes := NewPipePool(0)
	loops := newLoopsForTest(t, 2, pipes)
	ts := newServiceOn(t, pipes, loops, Settings{}, startServer(t, echoHandler))
	release := block(t, loops.loops[0]) // the loop the listener wakes first
	time.Sleep(2 * saturatedAfter)      // busy long enough to count as saturated
	const n = 3 * handoffSlack
	for i := range n {
		echoOnce(t, ts.dial(t), string(rune('a'+i)))
	}
	if got := loops.loops[1].shared.live.Load(); got != n {
		t.Fatalf("the free loop holds %d connections, want %d", got, n)
	}
	release()
	echoOnce(t, ts.dial(t), "after")
}

// TestIdleConnectionsSpreadOverLoops: long-lived connections opened one
// by one (light load: the first loop is always the one woken) end up on
// every loop, within handoffSlack of each other.
func TestIdleConnectionsSpreadOverLoops(t *testing.T) {
	pipes := NewPipePool(0)
	loops := newLoopsForTest(t, 3, pipes)
	ts := newServiceOn(t, pipes, loops, Settings{}, startServer(t, echoHandler))
	const n = 60
	for i := range n {
		// Light load: every loop is back in epoll_wait before the next
		// client comes (on a busy test machine that takes a moment).
		testutil.Eventually(t, 2*time.Second, "loops asleep", func() bool {
			for _, l := range loops.loops {
				if l.shared.awakeSince.Load() != 0 {
					return false
				}
			}
			return true
		})
		echoOnce(t, ts.dial(t), string(rune('A'+i%26)))
	}
	counts := loops.Conns()
	lo, hi := counts[0], counts[0]
	for _, c := range counts {
		lo, hi = min(lo, c), max(hi, c)
	}
	if hi-lo > handoffSlack+1 {
		t.Fatalf("connections per loop %v: spread wider than %d", counts, handoffSlack+1)
	}
}

// loopCPU is the CPU time loop l's thread has run (schedstat: nanoseconds).
func loopCPU(t *testing.T, l *loop) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/schedstat", l.shared.tid.Load()))
	if err != nil {
		t.Fatal(err)
	}
	var ns int64
	if _, err := fmt.Sscan(string(b), &ns); err != nil {
		t.Fatalf("schedstat %q: %v", b, err)
	}
	return time.Duration(ns)
}

// threadCPU is the calling thread's CPU time.
func threadCPU(t *testing.T) time.Duration { return rusageCPU(t, unix.RUSAGE_THREAD) }

// rusageCPU is the user+system CPU time getrusage(who) reports.
func rusageCPU(t *testing.T, who int) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestStalledClientCostsNothing: the backend sends to a client that does
// not read for a while. l4lb stops reading from the backend (the bytes
// wait in kernel buffers: its heap stays flat) and its loop sleeps, also
// once the backend has closed (a socket shut both ways reports a hang-up
// on every epoll_wait unless it is parked). Then the client reads every
// byte, in order.
func TestStalledClientCostsNothing(t *testing.T) {
	// 64 MiB: more than every buffer on the way, so the backend is still
	// sending. 128 KiB: fits in l4lb's buffers behind small ones towards
	// the client, so the backend finishes and closes while l4lb holds
	// bytes.
	for _, tc := range []struct {
		name string
		size int64
	}{{"backend still sending", 64 << 20}, {"backend closed", 128 << 10}} {
		t.Run(tc.name, func(t *testing.T) { stalledClient(t, tc.size) })
	}
}

func stalledClient(t *testing.T, size int64) {
	sent, closed := make(chan [32]byte, 1), make(chan struct{})
	addr := startServer(t, func(c *net.TCPConn) {
		sent <- sendRandom(c, size)
		c.Close()
		close(closed)
	})
	pipes := NewPipePool(0)
	ls := newLoopsForTest(t, 1, pipes)
	ts := newServiceOn(t, pipes, ls, Settings{}, addr)
	// Small buffers towards the client (accepted sockets inherit the
	// listener's), so that l4lb, not the kernel, holds what waits.
	small := func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}
	if err := unix.SetsockoptInt(ts.ev.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: small}
	conn, err := d.Dial("tcp4", ts.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	c := conn.(*net.TCPConn)
	defer c.Close()
	c.CloseWrite() // passed on: once the backend closes, its socket is shut both ways
	b := ts.backends[0]
	testutil.Eventually(t, 5*time.Second, "forwarding stalls", func() bool {
		before := b.Stats.BytesOut.Load()
		time.Sleep(100 * time.Millisecond)
		return b.Stats.BytesOut.Load() == before && before > 0
	})
	if size < 1<<20 {
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the backend could not send everything: the test needs larger buffers")
		}
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap := ms.HeapInuse
	// The loop's own thread: the CPU of the whole test process counts
	// the GC and other tests, and a busy machine does not add to it.
	cpu := loopCPU(t, ls.loops[0])
	time.Sleep(time.Second)
	if used := loopCPU(t, ls.loops[0]) - cpu; used > 20*time.Millisecond {
		t.Fatalf("the loop used %v of CPU in a second while the connection waited", used)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if grown := int64(ms.HeapInuse) - int64(heap); grown > 4<<20 {
		t.Fatalf("heap grew %d bytes while the client did not read", grown)
	}
	if moved := b.Stats.BytesOut.Load(); moved >= uint64(size) {
		t.Fatalf("%d bytes forwarded to a client that read nothing", moved)
	}
	h := sha256.New()
	c.SetReadDeadline(time.Now().Add(waitBound)) // 64 MiB through a 4 KiB receive buffer: 10 s was too tight on a busy machine
	n, err := io.Copy(h, c)
	if err != nil || n != size {
		t.Fatalf("client read %d bytes, %v", n, err)
	}
	if got, want := h.Sum(nil), within(t, sent, "the backend's checksum"); !bytes.Equal(got, want[:]) {
		t.Fatal("the bytes differ")
	}
}

// rawEchoServer is a loopback echo backend that allocates nothing per
// connection (raw syscalls, one buffer), so that a test can count the
// allocations of the process around it.
func rawEchoServer(t *testing.T) netip.AddrPort {
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
		buf := make([]byte, 64)
		for {
			fd, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(lfd), 0, 0, unix.SOCK_CLOEXEC, 0, 0)
			if errno == unix.EINTR {
				continue
			}
			if errno != 0 {
				return // shut down
			}
			rawDeadline(int(fd))
			if n, err := rawRead(int(fd), buf); err == nil && n > 0 {
				unix.Write(int(fd), buf[:n])
			}
			unix.Close(int(fd))
		}
	}()
	t.Cleanup(func() {
		unix.Shutdown(lfd, unix.SHUT_RDWR) // wakes the blocked accept
		<-done
		unix.Close(lfd)
	})
	return sockaddrAddrPort(sa)
}

// TestLoopConnectionAllocatesNothing counts the whole process's heap
// allocations while connections go through a loop (accept, pick, connect,
// a request and its answer both ways, close): the client and the backend
// use raw syscalls, so what is counted is the loop's.
func TestLoopConnectionAllocatesNothing(t *testing.T) { loopConnAllocs(t, Settings{}, nil) }

// TestLoopProxyHeaderAllocatesNothing: the same with a PROXY header
// accepted first (peeked, parsed, consumed; its source replaces the
// client's).
func TestLoopProxyHeaderAllocatesNothing(t *testing.T) {
	loopConnAllocs(t, Settings{AcceptProxy: AcceptProxyAny, AcceptProxyFrom: loopback}, hdr(2, "[2001:db8::7]:40001", "[2001:db8::10]:80"))
	loopConnAllocs(t, Settings{AcceptProxy: AcceptProxyV1, AcceptProxyFrom: loopback}, []byte("PROXY TCP6 2001:db8::7 2001:db8::10 40001 80\r\n"))
}

// loopConnAllocs counts allocations of connections that send header
// (if any), then a request.
func loopConnAllocs(t *testing.T, st Settings, header []byte) { loopConnAllocsPause(t, st, header, 0) }

// loopConnAllocsPause is loopConnAllocs with the client silent for pause
// after its connect (so that the loop has accepted it and waits).
func loopConnAllocsPause(t *testing.T, st Settings, header []byte, pause time.Duration) {
	pipes := NewPipePool(0)
	ts := newServiceOn(t, pipes, newLoopsForTest(t, 1, pipes), st, rawEchoServer(t))
	vip := &unix.SockaddrInet4{Port: int(ts.addr.Port()), Addr: ts.addr.Addr().As4()}
	msg, got := []byte("hello"), make([]byte, 5)
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
		tv := unix.NsecToTimeval(int64(5 * time.Second)) // every wait has a deadline
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			t.Fatal(err)
		}
		if pause > 0 {
			time.Sleep(pause)
		}
		if header != nil {
			if _, err := unix.Write(fd, header); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := unix.Write(fd, msg); err != nil {
			t.Fatal(err)
		}
		if n, err := readBlocking(fd, got); err != nil || n != len(msg) {
			t.Fatalf("read %d bytes, %v", n, err)
		}
	}
	for range warmConns { // free lists, tables and heaps reach their size
		conn()
	}
	const n = 1000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		conn()
	}
	runtime.ReadMemStats(&after)
	t.Logf("%d allocations for %d connections", after.Mallocs-before.Mallocs, n)
	// A few may come from the runtime; one per connection would be 1000.
	if a := after.Mallocs - before.Mallocs; a > n/50 {
		t.Fatalf("%d allocations for %d connections", a, n)
	}
}

// TestProxiedSocketOptions: both sockets of a proxied connection have
// Nagle's delay off (the client's inherited from the listener), and both
// get keepalive: the client's from the listener, the backend's once the
// connection has lived keepAliveAfter.
func TestProxiedSocketOptions(t *testing.T) {
	pipes := NewPipePool(0)
	loops := newLoopsForTest(t, 1, pipes)
	ts := newServiceOn(t, pipes, loops, Settings{KeepAlive: 45 * time.Second}, startServer(t, echoHandler))
	echoOnce(t, ts.dial(t), "hi")
	type opts struct{ noDelay, keepAlive, idle int }
	read := func(fd int) opts {
		var o opts
		o.noDelay, _ = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY)
		o.keepAlive, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		o.idle, _ = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		return o
	}
	sockets := func() (client, backend opts) {
		done := make(chan struct{})
		loops.loops[0].post(func() {
			defer close(done)
			for c := range loops.loops[0].conns {
				client, backend = read(c.clientSock.fd), read(c.backendSock.fd)
			}
		})
		within(t, done, "the loop to read the socket options")
		return client, backend
	}
	want := opts{noDelay: 1, keepAlive: 1, idle: 45}
	if client, _ := sockets(); client != want {
		t.Fatalf("client socket: %+v, want %+v", client, want)
	}
	testutil.Eventually(t, 3*keepAliveAfter, "the backend socket's keepalive", func() bool {
		_, backend := sockets()
		return backend == want
	})
}

// TestEndedConnectionsLeaveNoTimers: a connection's idle timer does not
// outlive it in the loop's heap. Without compaction every ended
// connection would leave an entry for idle_timeout (an hour here): the
// heap would hold one per connection ever made.
func TestEndedConnectionsLeaveNoTimers(t *testing.T) {
	pipes := NewPipePool(0)
	ls := newLoopsForTest(t, 1, pipes)
	ts := newServiceOn(t, pipes, ls, Settings{IdleTimeout: time.Hour}, rawEchoServer(t))
	vip := &unix.SockaddrInet4{Port: int(ts.addr.Port()), Addr: ts.addr.Addr().As4()}
	msg, got := []byte("hello"), make([]byte, 5)
	const n = 6000
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		rawDeadline(fd)
		if err := unix.Connect(fd, vip); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(fd, msg); err != nil {
			t.Fatal(err)
		}
		if k, err := rawRead(fd, got); err != nil || k != len(msg) {
			t.Fatalf("read %d bytes, %v", k, err)
		}
		unix.Close(fd)
	}
	var heap int
	ls.each(func(l *loop) { heap = len(l.timers.heap) })
	if heap > 3*minCompactTimers {
		t.Fatalf("%d timers in the heap after %d connections ended", heap, n)
	}
}

// stubTimer is a timed whose timers matter while live.
type stubTimer struct{ live bool }

func (s *stubTimer) onTimer(*loop, uint32) {}
func (s *stubTimer) pending(uint32) bool   { return s.live }

// TestCompactTimersKeepsOrder: after dropping the timers that no longer
// matter, the rest still pop in deadline order.
func TestCompactTimersKeepsOrder(t *testing.T) {
	l := &loop{timers: timerQueue{compactAt: minCompactTimers}}
	keep, drop := &stubTimer{live: true}, &stubTimer{}
	r := rand.New(rand.NewPCG(1, 2))
	want := 0
	for i := range 5000 {
		owner := drop
		if i%3 == 0 {
			owner, want = keep, want+1
		}
		l.timers.heap.push(timerEntry{at: r.Int64N(1 << 40), t: owner})
	}
	l.compactTimers()
	if len(l.timers.heap) != want || l.timers.compactAt != max(2*want, minCompactTimers) {
		t.Fatalf("%d timers kept (want %d), next compaction at %d", len(l.timers.heap), want, l.timers.compactAt)
	}
	last := int64(-1)
	for len(l.timers.heap) > 0 {
		e := l.timers.heap.pop()
		if e.t != keep || e.at < last {
			t.Fatalf("popped %+v after %d", e, last)
		}
		last = e.at
	}
}

// TestBusyPoll: with busy_poll a loop polls for events before it sleeps,
// for no longer than busy_poll; without it, it sleeps at once. (The wait
// is driven on the test's own locked thread.)
//
// What tells polling from sleeping is where the kernel says the thread
// waits (/proc/.../wchan): in epoll_wait only once it sleeps there. Its
// state letter or its CPU says nothing on a busy machine: a polling
// thread is seen asleep (S) while the Go runtime parks it on a futex
// (preempted or stopped for GC: it holds no P), and runnable (R) long
// after its poll ran out when no CPU was free to end it; the event
// itself is posted by the goroutine that looks, once it has seen what it
// needs, so no timer can come too early or too late.
func TestBusyPoll(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l, err := newLoop(0, NewPipePool(0), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	tid := unix.Gettid()
	// pollFor waits with busy polling set to spin while another goroutine
	// looks where the thread waits, about every millisecond, until done
	// says it has seen enough (or for waitBound), then posts a task. It
	// returns the events, the wall time, and when the thread was first
	// seen asleep in epoll_wait (0: never).
	pollFor := func(spin time.Duration, done func(since time.Duration, asleep bool) bool) (n int, wall, asleep time.Duration) {
		l.shared.busyPoll.Store(int64(spin))
		start := time.Now()
		looked := make(chan time.Duration, 1)
		go func() {
			first := time.Duration(0)
			defer func() { l.wake(); looked <- first }()
			for {
				in := sleepsInEpoll(t, tid)
				since := time.Since(start) // after the look: the sleep began before
				if in && first == 0 {
					first = since
				}
				if done(since, in) || since > waitBound {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		n, err := l.poll()
		if err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		wall = time.Since(start)
		asleep = <-looked
		var b [8]byte
		_, _ = readRetry(l.wakefd, b[:]) // as dispatch does
		l.posted.woken.Store(false)
		return n, wall, asleep
	}
	// Off: it sleeps in epoll_wait at once (a loop that polls never does).
	if n, wall, asleep := pollFor(0, func(_ time.Duration, in bool) bool { return in }); n != 1 || asleep == 0 {
		t.Errorf("busy_poll off: %d events after %v, asleep in epoll_wait at %v (0: never); want 1 event, the thread asleep", n, wall, asleep)
	}
	// The event comes while the loop polls: served without a sleep. The
	// looks span 50ms, where a loop that does not poll sleeps.
	const long = time.Minute
	looks := 0
	n, wall, asleep := pollFor(long, func(since time.Duration, _ bool) bool { looks++; return since >= 50*time.Millisecond && looks >= 5 })
	if n != 1 || wall >= long || asleep != 0 {
		t.Errorf("busy_poll %v, event after 50ms: %d events after %v, asleep in epoll_wait at %v (0: never); want 1 event before the poll ended, never asleep", long, n, wall, asleep)
	}
	// The event comes once the loop sleeps: it polled for 40ms first (it
	// cannot sleep before), then slept (a loop that kept polling never
	// does: the looks end at waitBound).
	const spin = 40 * time.Millisecond
	if n, wall, asleep := pollFor(spin, func(_ time.Duration, in bool) bool { return in }); n != 1 || asleep < spin {
		t.Errorf("busy_poll %v: %d events after %v, asleep in epoll_wait at %v (0: never); want 1 event, asleep after polling for %v", spin, n, wall, asleep, spin)
	}
}

// sleepsInEpoll reports whether thread tid of this process sleeps in
// epoll_wait: its wait channel (/proc/self/task/TID/wchan; "0" when it
// runs or is runnable) is the kernel's epoll wait (ep_poll before Linux
// 5.x, do_epoll_wait since).
func sleepsInEpoll(t *testing.T, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/wchan", tid))
	if err != nil {
		t.Error(err)
		return false
	}
	w := string(b)
	return w == "ep_poll" || w == "do_epoll_wait"
}

// warmConns is how many connections a test that counts allocations runs
// first on one loop, so that free lists, tables and heaps reach their size
// (in l4lbpoison builds a freed struct is reused only after quarantineLen
// more have been freed).
const warmConns = quarantineLen + 50
