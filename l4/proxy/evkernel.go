// Kernel forwarding: an open connection whose sockets the sk_skb program
// of l4/sockfwd forwards, with l4lb watching only for FIN, reset and
// idleness.

package proxy

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/sockfwd"
)

// kernEvents is what a kernel-forwarded connection's sockets stay
// registered for: a FIN or a reset (EPOLLHUP and EPOLLERR always come).
// Not EPOLLIN: the program's data_ready wakes the socket's waiters after
// every skb it redirects, and an interest in EPOLLIN would wake the loop
// per request.
const kernEvents = unix.EPOLLRDHUP | unix.EPOLLET

// kernPollMax bounds the wait between two looks at a direction whose FIN
// waits for the kernel to send on what it forwarded.
const kernPollMax = 100 * time.Millisecond

// KernelFwd is the process's kernel forwarding: the sockfwd program,
// loaded when the first connection asks for it. One for all VIPs.
type KernelFwd struct {
	log  *zap.Logger
	once sync.Once
	f    *sockfwd.Forwarder // nil: not loaded (or could not be); written in once
	// state is what status says: nil until the first load.
	state atomic.Pointer[string]

	conns atomic.Int64  // connections forwarded in the kernel now
	total atomic.Uint64 // connections ever moved into the kernel
	fails atomic.Uint64 // connections that asked and stayed in user space (an Add failed)
}

// NewKernelFwd makes the process's kernel forwarding; nothing loads yet.
func NewKernelFwd(log *zap.Logger) *KernelFwd { return &KernelFwd{log: log} }

// forwarder loads the program on first use; nil when it cannot load.
func (k *KernelFwd) forwarder() *sockfwd.Forwarder {
	k.once.Do(func() {
		f, err := sockfwd.Load()
		state := "loaded"
		if err != nil {
			state = "unavailable: " + err.Error()
			k.log.Warn("kernel forwarding unavailable: connections stay on splice", zap.Error(err))
		}
		k.f = f
		k.state.Store(&state)
	})
	return k.f
}

// Close unloads the program, once no connection uses it.
func (k *KernelFwd) Close() {
	k.once.Do(func() {}) // no load after this
	if k.f != nil {
		_ = k.f.Close()
	}
}

// fillStatus adds the kernel path's counts to s.
func (k *KernelFwd) fillStatus(s *plane.Status, live int64) {
	st := &s.Kernel
	st.State = "not loaded"
	if p := k.state.Load(); p != nil {
		st.State = *p
	}
	st.Conns = k.conns.Load()
	st.UserConns = max(live-st.Conns, 0)
	st.Total = k.total.Load()
	st.Failed = k.fails.Load()
}

// kernConn is a kernel-forwarded connection's state, kept by its loop
// (evConn has no room: its size class is 640 bytes).
type kernConn struct {
	f    *sockfwd.Forwarder
	pair sockfwd.Pair // A: the client's socket (up's source), B: the backend's
	// base is what each destination's send queue had taken when the
	// connection entered the kernel: [0] the backend's (up), [1] the
	// client's (down).
	base [2]uint64
	seen [2]uint64     // the program's counts already added to the stats
	wait time.Duration // the last poll's wait for a FIN that waits on the kernel (backs off)
	due  int64         // loop clock when the armed poll fires; 0 = none armed
	ka   bool          // the backend's keepalive is set
}

// kernelReady reports whether c may enter the kernel now: it asks, it is
// open, nothing it read waits to be written, neither side closed, and it
// needs no byte in user space (app_protocol trackers, stall_timeout's
// request clock, retry_on_reset's copy of the client's bytes until the
// backend answers).
func (c *evConn) kernelReady() bool {
	c.mustLive()
	return c.st.KernelForward && c.svc.ev.kernel != nil && c.state == evOpen && !c.kernel &&
		c.app == nil && c.st.AppProtocol == l4.AppNone && c.st.StallTimeout == 0 && !c.pick.replaying &&
		c.up.pending == 0 && c.down.pending == 0 && !c.up.eof && !c.down.eof &&
		!c.clientSock.rdhup && !c.backendSock.rdhup
}

// toKernel puts c's sockets into the forwarding map. On any failure
// before the sockets are in, c goes on in user space.
func (c *evConn) toKernel(l *loop) {
	c.mustLive()
	k := c.svc.ev.kernel
	f := k.forwarder()
	if f == nil {
		return
	}
	kc := &kernConn{f: f}
	var err error
	if kc.base[0], err = sendTaken(c.backendSock.fd); err == nil {
		kc.base[1], err = sendTaken(c.clientSock.fd)
	}
	if err == nil {
		kc.pair, err = f.Add(c.clientSock.fd, c.backendSock.fd)
	}
	if err != nil {
		k.fails.Add(1)
		if !errors.Is(err, unix.EOPNOTSUPP) { // a socket no longer established (a FIN came): expected, not logged
			c.svc.rateLog("kernel forwarding refused a connection: it stays in user space", zap.Error(err))
		}
		return
	}
	c.kernel = true
	l.kern[c] = kc
	k.conns.Add(1)
	k.total.Add(1)
	c.putPipe(l, &c.up)
	c.putPipe(l, &c.down)
	for _, sk := range [2]*sock{&c.clientSock, &c.backendSock} {
		sk.readable, sk.writable = false, false
		if err := l.modify(&sk.reg, kernEvents); err != nil {
			// Bytes may be in the kernel's queues already: a reset is
			// the one honest end.
			c.finish(l, true, true, c.resetOf(sk == &c.clientSock))
			return
		}
	}
}

// kernEvent handles a FIN, hang-up or error on a kernel-forwarded socket.
func (c *evConn) kernEvent(l *loop, sk *sock, events uint32) {
	c.mustLive()
	if events&unix.EPOLLERR != 0 {
		c.failed(l, &sk.reg) // a reset: the other side learns by one too
		return
	}
	if events&(unix.EPOLLRDHUP|unix.EPOLLHUP) != 0 {
		d := &c.up
		if sk == &c.backendSock {
			d = &c.down
		}
		if !d.eof {
			c.sawFIN(d)
			d.eof = true
		}
	}
	c.kernFlush(l)
}

// kernFlush passes on each FIN (and, closing, sends each side its FIN)
// once the kernel has sent on every byte the direction received before
// it; a direction still sending is looked at again after a short wait.
func (c *evConn) kernFlush(l *loop) {
	c.mustLive()
	kc := l.kern[c]
	closing := c.state == evClosing
	waiting := false
	for _, d := range [2]*evDir{&c.up, &c.down} {
		if c.ended() || c.state == evHanding {
			return
		}
		if d.done || !(d.eof || closing) {
			continue
		}
		if !c.kernDrained(kc, d) {
			waiting = true
			continue
		}
		if !closing {
			c.passEOF(l, d) // may end c
			continue
		}
		if err := shutdownWrite(d.dst.fd); err != nil {
			c.dstFailed(l, d, err)
			return
		}
		d.done = true
	}
	switch {
	case c.ended():
	case closing && c.up.done && c.down.done && c.up.eof && c.down.eof:
		c.finish(l, false, false, l4.EndRebalance)
	case waiting && kc.due == 0: // one poll armed at a time
		kc.wait = min(max(2*kc.wait, time.Millisecond), kernPollMax)
		kc.due = l.now() + int64(kc.wait)
		l.after(kc.wait, c, c.gen<<2|timerKeepAlive)
	case !waiting:
		kc.wait = 0
	}
}

// kernDrained reports whether the kernel has sent on everything d's
// source received: its receive queue is empty (the program took every
// skb) and d's destination's send queue has taken as many bytes as the
// program redirected (none wait in the destination's psock queue).
func (c *evConn) kernDrained(kc *kernConn, d *evDir) bool {
	c.mustLive()
	inq, err := unix.IoctlGetInt(d.src.fd, unix.SIOCINQ)
	if err != nil || inq > 0 {
		return err != nil // a socket that cannot say holds nothing we could wait for
	}
	src, i := kc.pair.A, 0
	if d == &c.down {
		src, i = kc.pair.B, 1
	}
	dir, err := kc.f.Read(src)
	if err != nil {
		return true
	}
	taken, err := sendTaken(d.dst.fd)
	if err != nil {
		return true
	}
	return taken-kc.base[i] >= dir.Bytes
}

// kernTimer: a poll for a FIN waiting on the kernel, or the backend's
// keepalive (the timer kind both use).
func (c *evConn) kernTimer(l *loop) {
	c.mustLive()
	kc := l.kern[c]
	if !kc.ka && c.st.KeepAlive > 0 && c.backendSock.fd >= 0 {
		kc.ka = true
		setKeepAliveFD(c.backendSock.fd, c.st.KeepAlive, false)
	}
	if kc.due != 0 && l.now() >= kc.due {
		kc.due = 0
		c.kernFlush(l)
	}
}

// kernSync adds what the program counted since the last sync to the
// connection's and its backend's byte counts, and moves each direction's
// last activity up to the program's.
func (c *evConn) kernSync(l *loop) {
	c.mustLive()
	kc := l.kern[c]
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	mono := ts.Nano()
	for i, d := range [2]*evDir{&c.up, &c.down} {
		cookie := kc.pair.A
		if i == 1 {
			cookie = kc.pair.B
		}
		dir, err := kc.f.Read(cookie)
		if err != nil {
			continue
		}
		if n := dir.Bytes - kc.seen[i]; dir.Bytes > kc.seen[i] {
			kc.seen[i] = dir.Bytes
			d.bytes.Add(n)
			d.n += n
		}
		if dir.LastNs > 0 {
			d.at = max(d.at, l.now()-max(mono-dir.LastNs, 0))
		}
	}
}

// kernEnd takes c out of the kernel as it ends: the counts are synced,
// the map entries removed (closing the sockets drops what the kernel
// still held for them).
func (c *evConn) kernEnd(l *loop) {
	c.mustLive()
	kc := l.kern[c]
	c.kernSync(l)
	kc.f.Remove(kc.pair)
	delete(l.kern, c)
	c.kernel = false
	c.svc.ev.kernel.conns.Add(-1)
}

// sendTaken is how many bytes fd's send queue has taken in all: those
// acknowledged plus those still queued (TCP_INFO bytes_acked, SIOCOUTQ).
func sendTaken(fd int) (uint64, error) {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, err
	}
	outq, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
	if err != nil {
		return 0, err
	}
	return info.Bytes_acked + uint64(max(outq, 0)), nil
}
