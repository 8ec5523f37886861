// probeloop_linux.go: the tcp check of every target on one epoll loop: non-blocking connects, one timer heap.

package health

import (
	"container/heap"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/proxyhdr"
)

// probeLoop runs the tcp checks of all of a Manager's targets on one
// goroutine that sleeps in its own epoll_wait: a socket, a non-blocking
// connect registered in the loop's epoll set, the handshake RTT from
// TCP_INFO, and the same polite
// close as the goroutine path (a FIN, the server's bytes read and
// discarded until its FIN or closeGrace). Every target is one entry of
// one timer heap: its next start while idle, its deadline while a probe
// is in flight. No goroutine, timer or allocation per probe.
//
// Fields are ordered by owner: immutable, then guarded by mu, then the
// loop thread's own.
type probeLoop struct {
	m      *Manager
	epfd   int
	wakefd int // eventfd: commands are waiting
	done   chan struct{}

	mu       sync.Mutex
	cmds     []loopCmd
	stopping bool

	heap    loopHeap
	byFD    map[int32]*loopProbe
	yielded time.Time // when the loop last yielded to the Go scheduler
	cmdsRun []loopCmd // the commands being run (swapped with cmds)
	events  [64]unix.EpollEvent
	ev      unix.EpollEvent // scratch for epoll_ctl
	info    unix.TCPInfo
	drain   [4096]byte
}

// loopCmd adds a probe to the loop or removes it.
type loopCmd struct {
	p      *loopProbe
	remove bool
}

// probeState is where a loop probe stands.
type probeState uint8

const (
	probeIdle       probeState = iota // waiting for its next start
	probeConnecting                   // connect in flight, until the timeout
	probeClosing                      // FIN sent, reading until the server's FIN or the grace
)

// loopProbe is one target on the loop. The top block is set before the
// probe reaches the loop and never changes (an update removes the probe
// and adds a new one); the rest is the loop thread's.
type loopProbe struct {
	t        *target
	sa       unix.Sockaddr
	family   int
	interval time.Duration
	timeout  time.Duration
	metric   l4.RTTMetric
	proxy    l4.ProxyVersion
	done     chan struct{} // closed once the loop has dropped the probe

	state   probeState
	removed bool
	fd      int       // -1 unless a probe is in flight
	next    time.Time // the planned start of the current or next probe
	at      time.Time // heap key: next start, or the in-flight deadline
	idx     int       // heap index, -1 when not in the heap
	drained int
	res     Result
}

// loopEvents are what a probe socket waits for: the connect's end, the
// server's bytes and FIN. Edge-triggered: each arrival is one edge.
const loopEvents = unix.EPOLLOUT | unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET

// newProbeLoop makes the loop and starts its thread; enter (nil: none)
// runs first on that thread (a test moves it into a namespace).
func newProbeLoop(m *Manager, enter func() error) (*probeLoop, error) {
	l, err := makeProbeLoop(m)
	if err != nil {
		return nil, err
	}
	started := make(chan error, 1)
	go l.run(enter, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return l, nil
}

// makeProbeLoop makes the loop's epoll set and eventfd, without a thread.
func makeProbeLoop(m *Manager) (*probeLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("probe loop: epoll_create: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("probe loop: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("probe loop: epoll_ctl: %w", err)
	}
	return &probeLoop{m: m, epfd: epfd, wakefd: wakefd, done: make(chan struct{}),
		byFD: make(map[int32]*loopProbe)}, nil
}

// newLoopProbe prepares t's probe of addr with spec (defaults applied);
// ok is false for an address the loop does not dial (an IPv6 zone).
func newLoopProbe(t *target, addr netip.AddrPort, spec Spec) (*loopProbe, bool) {
	p := &loopProbe{t: t, interval: spec.Interval, timeout: spec.Timeout, metric: rttMetric(spec),
		proxy: spec.ProxyHeader, fd: -1, idx: -1, done: make(chan struct{})}
	ip := addr.Addr().Unmap()
	switch {
	case ip.Is4():
		p.family, p.sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: ip.As4()}
	case ip.Is6() && ip.Zone() == "":
		p.family, p.sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(addr.Port()), Addr: ip.As16()}
	default:
		return nil, false
	}
	return p, true
}

// add hands p to the loop, its first start at first. It returns the
// functions that ask the loop to drop p and that wait until it has.
func (l *probeLoop) add(p *loopProbe, first time.Time) (cancel func(), done chan struct{}) {
	p.next, p.at = first, first
	l.post(loopCmd{p: p})
	return func() { l.post(loopCmd{p: p, remove: true}) }, p.done
}

// post queues a command and wakes the loop.
func (l *probeLoop) post(c loopCmd) {
	l.mu.Lock()
	l.cmds = append(l.cmds, c)
	l.mu.Unlock()
	l.wake()
}

// wake makes the loop's epoll_wait return.
func (l *probeLoop) wake() {
	one := uint64(1)
	_, _ = unix.Write(l.wakefd, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// close stops the loop (every probe already removed) and waits for it.
func (l *probeLoop) close() {
	l.mu.Lock()
	l.stopping = true
	l.mu.Unlock()
	l.wake()
	<-l.done
}

// yieldEvery is how often the loop yields to the Go scheduler, under the
// runtime's 10ms preemption threshold (as the proxy's event loops do).
const yieldEvery = 8 * time.Millisecond

// run is the loop's goroutine. With enter it locks its thread to the end,
// so that a thread that enter moved into another namespace is discarded
// with the goroutine; without, it needs no thread of its own.
func (l *probeLoop) run(enter func() error, started chan<- error) {
	if enter != nil {
		runtime.LockOSThread()
		if err := enter(); err != nil {
			l.release()
			started <- fmt.Errorf("probe loop: %w", err)
			return
		}
	}
	started <- nil
	defer l.release()
	for l.turn(-1) {
	}
}

// release closes the loop's descriptors and every in-flight probe's.
func (l *probeLoop) release() {
	for fd := range l.byFD {
		unix.Close(int(fd))
	}
	unix.Close(l.wakefd)
	unix.Close(l.epfd)
	close(l.done)
}

// turn waits for events or the next timer (at most maxWait ms unless
// negative), handles them and fires what is due. It returns false once
// the loop is stopping.
func (l *probeLoop) turn(maxWait int) bool {
	wait := l.waitMS(time.Now())
	if maxWait >= 0 && (wait < 0 || wait > maxWait) {
		wait = maxWait
	}
	n, err := unix.EpollWait(l.epfd, l.events[:], wait)
	if err != nil && err != unix.EINTR {
		panic(fmt.Sprintf("health: probe loop: epoll_wait: %v", err)) // a bad epoll fd: nothing can go on
	}
	return l.handle(n, time.Now())
}

// handle runs n events of the batch, then fires the due timers; false
// once the loop is stopping.
func (l *probeLoop) handle(n int, now time.Time) bool {
	if now.Sub(l.yielded) > yieldEvery {
		// A goroutine that never passes through the scheduler looks
		// stuck to the runtime: past 10ms its monitor thread preempts it
		// and keeps polling every 20µs, which costs more than the probes.
		runtime.Gosched()
		l.yielded = now
	}
	for i := range n {
		ev := &l.events[i]
		if ev.Fd == int32(l.wakefd) {
			if !l.commands() {
				return false
			}
			continue
		}
		if p := l.byFD[ev.Fd]; p != nil {
			l.event(p, ev.Events, now)
		}
	}
	l.fire(now)
	return true
}

// waitMS is how long epoll_wait may sleep: until the earliest heap entry,
// rounded up to the millisecond (never early), or -1 with none.
func (l *probeLoop) waitMS(now time.Time) int {
	if len(l.heap) == 0 {
		return -1
	}
	d := l.heap[0].at.Sub(now)
	if d <= 0 {
		return 0
	}
	return int(min((d+time.Millisecond-1)/time.Millisecond, 1<<30))
}

// commands runs the queued commands; false once the loop is stopping.
func (l *probeLoop) commands() bool {
	var buf [8]byte
	_, _ = unix.Read(l.wakefd, buf[:])
	l.mu.Lock()
	l.cmds, l.cmdsRun = l.cmdsRun[:0], l.cmds
	stopping := l.stopping
	l.mu.Unlock()
	for i, c := range l.cmdsRun {
		if c.remove {
			l.drop(c.p)
		} else if !c.p.removed {
			heap.Push(&l.heap, c.p)
		}
		l.cmdsRun[i] = loopCmd{}
	}
	return !stopping
}

// drop takes p off the loop: an in-flight probe's socket closes at once
// and nothing more is reported for it.
func (l *probeLoop) drop(p *loopProbe) {
	if p.removed {
		return
	}
	p.removed = true
	if p.idx >= 0 {
		heap.Remove(&l.heap, p.idx)
	}
	l.closeFD(p)
	close(p.done)
}

// fire starts the probes that are due and ends the ones past their deadline.
func (l *probeLoop) fire(now time.Time) {
	for len(l.heap) > 0 && !l.heap[0].at.After(now) {
		p := l.heap[0]
		switch p.state {
		case probeIdle:
			l.start(p, now)
		case probeConnecting:
			p.res.OK, p.res.Reason = false, timeoutReason(p.timeout)
			l.finish(p, now)
		case probeClosing:
			l.finish(p, now) // the server kept the connection: close anyway
		}
	}
}

// timeoutReason is the connect timeout's reason, as the goroutine path words it.
func timeoutReason(budget time.Duration) string {
	return fmt.Sprintf("timeout after %v connecting", budget)
}

// start begins a probe: a non-blocking socket and connect, registered
// for its completion, the deadline at the timeout.
func (l *probeLoop) start(p *loopProbe, now time.Time) {
	p.res, p.drained = Result{Start: now}, 0
	fd, err := unix.Socket(p.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		l.failNow(p, err, now)
		return
	}
	p.fd = fd
	if err := unix.Connect(fd, p.sa); err != nil && err != unix.EINPROGRESS {
		l.failNow(p, err, now)
		return
	}
	l.ev = unix.EpollEvent{Events: loopEvents, Fd: int32(fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &l.ev); err != nil {
		l.failNow(p, err, now)
		return
	}
	l.byFD[int32(fd)] = p
	p.state, p.at = probeConnecting, now.Add(p.timeout)
	heap.Fix(&l.heap, p.idx)
}

// failNow ends a probe that failed before it could wait for anything.
func (l *probeLoop) failNow(p *loopProbe, err error, now time.Time) {
	p.res.OK, p.res.Reason = false, describeErr(err, "connecting")
	l.finish(p, now)
}

// event handles what the kernel reported for p's socket.
func (l *probeLoop) event(p *loopProbe, events uint32, now time.Time) {
	switch p.state {
	case probeConnecting:
		l.connected(p, events, now)
	case probeClosing:
		l.drainAndClose(p, now)
	}
}

// connected judges the connect: an error fails the probe, a completed
// handshake passes it with the kernel's RTT, then the polite close
// starts (the PROXY header first, when the check sends one).
func (l *probeLoop) connected(p *loopProbe, events uint32, now time.Time) {
	if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 || events&unix.EPOLLOUT == 0 {
		l.failNow(p, soError(p.fd), now)
		return
	}
	p.res.Connect, p.res.KernelRTT = now.Sub(p.res.Start), false
	if getTCPInfo(p.fd, &l.info) == nil && l.info.Rtt > 0 {
		p.res.Connect, p.res.KernelRTT = time.Duration(l.info.Rtt)*time.Microsecond, true
	}
	if p.proxy != l4.ProxyOff {
		if err := sendProxyHeader(p.fd, p.proxy); err != nil {
			p.res.Connect, p.res.KernelRTT = 0, false
			l.failNow(p, err, now)
			return
		}
	}
	p.res.OK, p.res.Reason = true, ""
	_ = unix.Shutdown(p.fd, unix.SHUT_WR)
	p.state, p.at = probeClosing, minTime(now.Add(closeGrace), p.res.Start.Add(p.timeout))
	heap.Fix(&l.heap, p.idx)
	if events&(unix.EPOLLIN|unix.EPOLLRDHUP) != 0 {
		l.drainAndClose(p, now) // the server's bytes or FIN came with the handshake
	}
}

// drainAndClose reads and discards what the server sent; the server's
// FIN (or an error, or drainLimit) ends the probe. EAGAIN waits for the
// next edge.
func (l *probeLoop) drainAndClose(p *loopProbe, now time.Time) {
	for p.drained < drainLimit {
		n, err := unix.Read(p.fd, l.drain[:min(len(l.drain), drainLimit-p.drained)])
		if n > 0 {
			p.drained += n
			continue
		}
		if err == unix.EAGAIN {
			return
		}
		if err != unix.EINTR {
			break // 0: the server's FIN; an error: nothing more to wait for
		}
	}
	l.finish(p, now)
}

// finish closes p's socket, reports the result and plans the next start:
// the previous planned start plus the jittered interval, or now when the
// loop fell behind.
func (l *probeLoop) finish(p *loopProbe, now time.Time) {
	l.closeFD(p)
	p.res.Took = now.Sub(p.res.Start)
	p.t.observe(l.m, p.res, p.metric)
	next, late := p.next.Add(jittered(p.interval)), false
	if at := time.Now(); next.Before(at) {
		next, late = at, true
	}
	l.m.planned(p.t.key, next, late)
	p.state, p.next, p.at = probeIdle, next, next
	heap.Fix(&l.heap, p.idx)
}

// closeFD closes p's socket (which leaves the epoll set with it).
func (l *probeLoop) closeFD(p *loopProbe) {
	if p.fd < 0 {
		return
	}
	delete(l.byFD, int32(p.fd))
	unix.Close(p.fd)
	p.fd = -1
}

// soError is the pending error of a socket whose connect failed.
func soError(fd int) error {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	switch {
	case err != nil:
		return err
	case v != 0:
		return unix.Errno(v)
	}
	return unix.ECONNRESET // hung up with no error recorded
}

// getTCPInfo reads TCP_INFO into info without allocating.
func getTCPInfo(fd int, info *unix.TCPInfo) error {
	size := uint32(unsafe.Sizeof(*info))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(info)), uintptr(unsafe.Pointer(&size)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// sendProxyHeader writes the PROXY header on a connected socket: the
// probe's own addresses as the client's, the backend's as the destination.
func sendProxyHeader(fd int, version l4.ProxyVersion) error {
	src, err1 := unix.Getsockname(fd)
	dst, err2 := unix.Getpeername(fd)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("sending PROXY header: addresses: %v %v", err1, err2)
	}
	var buf [proxyhdr.MaxLen]byte
	b := proxyhdr.Append(buf[:0], int(version), sockAddrPort(src), sockAddrPort(dst))
	n, err := unix.Write(fd, b)
	if err != nil {
		return fmt.Errorf("sending PROXY header: %w", err)
	}
	if n != len(b) {
		return fmt.Errorf("sending PROXY header: wrote %d of %d bytes", n, len(b))
	}
	return nil
}

// sockAddrPort converts an inet sockaddr.
func sockAddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// loopHeap orders probes by their next timer (container/heap).
type loopHeap []*loopProbe

func (h loopHeap) Len() int           { return len(h) }
func (h loopHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h loopHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *loopHeap) Push(x any) {
	p := x.(*loopProbe)
	p.idx = len(*h)
	*h = append(*h, p)
}

func (h *loopHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	p.idx = -1
	return p
}
