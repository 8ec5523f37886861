// One BFD session: its sending socket, its timers (with jitter) and the
// state machine they drive, on a thread of its own.

package bfd

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SessionConfig is one peer's session.
type SessionConfig struct {
	Peer netip.Addr
	// Local is the source address of the packets; the zero value lets
	// the kernel pick the address of the route to Peer (the address the
	// BGP session uses too).
	Local netip.Addr
	// Interval is both the transmit and the receive interval while Up
	// (DesiredMinTx and RequiredMinRx); Multiplier the detect multiplier.
	Interval   time.Duration
	Multiplier uint8
}

// Change is one state change of a session.
type Change struct {
	Peer        netip.Addr
	From, To    State
	Diag        Diag  // why, when To is Down
	RemoteState State // the remote's state as last heard (AdminDown: it stopped on purpose)
}

// Failure reports whether the change is a path failure that should take
// the client protocol down: Up to Down, not because the remote said
// AdminDown (RFC 5882 section 3.2).
func (c Change) Failure() bool {
	return c.From == StateUp && c.To == StateDown && c.RemoteState != StateAdminDown
}

// SessionStatus is a session at one moment.
type SessionStatus struct {
	Config      SessionConfig
	State       State
	RemoteState State
	Diag        Diag
	LocalDiscr  uint32
	RemoteDiscr uint32
	Since       time.Time     // the last state change
	TxInterval  time.Duration // the periodic interval before jitter
	DetectTime  time.Duration // 0 while nothing is heard
	Sent        uint64
	Received    uint64
	SendErrors  uint64
	Dropped     uint64 // received and discarded (A bit, session AdminDown)
	Ups, Downs  uint64 // transitions into Up, and from Up to Down
	// MaxTxGap is the longest time between two packets sent while the
	// session was up: near the interval, unless this process was not
	// scheduled (a gap past the router's detection time takes the
	// session down there).
	MaxTxGap time.Duration
}

// timerTick bounds how long the session's thread sleeps at once: the
// granularity at which it notices a rearmed transmit time or a stop.
const timerTick = 10 * time.Millisecond

// Session is one running session. Its timers run on a thread of its own
// (locked, at nice -20 where allowed) that sleeps in the kernel, not on Go
// timers: a busy host or runtime delays the packets that keep the router's
// session up as little as possible. Received packets are applied by the
// server's receiving thread; state changes reach OnChange from a goroutine
// of the session's, never from those threads.
type Session struct {
	cfg      SessionConfig
	conn     *net.UDPConn
	changes  chan Change
	stop     atomic.Bool
	done     chan struct{} // the timer thread ended
	notified chan struct{} // the notifier ended

	sent, received, sendErrors, dropped, ups, downs atomic.Uint64
	maxTxGap                                        atomic.Int64

	mu     sync.Mutex // guards what follows
	closed bool       // close ran: nothing more is applied or reported
	f      fsm
	since  time.Time
	next   time.Time // the next periodic packet
	lastTx time.Time // the last packet sent while up; zero after one sent otherwise
	buf    [PacketLen]byte
}

// dialSession opens the sending socket: source port in 49152..65535,
// TTL (hop limit) 255, connected to the peer's port.
func dialSession(cfg SessionConfig, peerPort uint16) (*net.UDPConn, error) {
	network, level, opt := "udp4", unix.IPPROTO_IP, unix.IP_TTL
	if cfg.Peer.Is6() && !cfg.Peer.Is4In6() {
		network, level, opt = "udp6", unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS
	}
	var sockErr error
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		err := c.Control(func(fd uintptr) { sockErr = unix.SetsockoptInt(int(fd), level, opt, TTL) })
		if err != nil {
			return err
		}
		return sockErr
	}}
	span := SourcePortMax - SourcePortMin + 1
	first := rand.IntN(span)
	var last error
	for i := range 64 {
		port := SourcePortMin + (first+i*7919)%span
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(cfg.Local, uint16(port)))
		if !cfg.Local.IsValid() {
			d.LocalAddr = &net.UDPAddr{Port: port}
		}
		c, err := d.Dial(network, netip.AddrPortFrom(cfg.Peer, peerPort).String())
		if err == nil {
			return c.(*net.UDPConn), nil
		}
		last = err
		if !errors.Is(err, unix.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("bfd: socket to %v: %w", cfg.Peer, last)
}

func newSession(cfg SessionConfig, discr uint32, conn *net.UDPConn, onChange func(Change)) *Session {
	s := &Session{cfg: cfg, conn: conn, changes: make(chan Change, 64), done: make(chan struct{}), notified: make(chan struct{}),
		f: newFSM(discr, cfg.Interval, cfg.Multiplier), since: time.Now()}
	go func() {
		defer close(s.notified)
		for c := range s.changes {
			if onChange != nil {
				onChange(c)
			}
		}
	}()
	return s
}

// jitter is the wait before the next periodic packet: 75..100% of d, or
// 75..90% with a detect multiplier of 1 (RFC 5880 section 6.8.7).
func jitter(d time.Duration, mult uint8) time.Duration {
	spread := d / 4
	if mult == 1 {
		spread = d * 15 / 100
	}
	if spread <= 0 {
		return d
	}
	return d*3/4 + rand.N(spread)
}

// highPriority raises the calling thread's priority (nice -20); best
// effort: without CAP_SYS_NICE it stays as it is.
func highPriority() { _ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), -20) }

// run is the session's timer thread: periodic packets and the detection
// timer, until stop. The thread ends with it (it stays locked).
func (s *Session) run() {
	runtime.LockOSThread()
	highPriority()
	defer close(s.done)
	s.mu.Lock()
	s.next = time.Now()
	s.mu.Unlock()
	for !s.stop.Load() {
		now := time.Now()
		s.mu.Lock()
		o := s.f.expire(now)
		s.afterLocked(o, now)
		if !now.Before(s.next) {
			s.sendLocked(now)
			s.next = now.Add(jitter(s.f.txInterval(), s.f.mult))
		}
		wait := s.next.Sub(now)
		if dt := s.f.detectTime(); dt > 0 {
			wait = min(wait, s.f.lastRx.Add(dt).Sub(now))
		}
		s.mu.Unlock()
		// In the kernel, not on a Go timer: woken at the time whatever
		// the rest of the process does.
		ts := unix.NsecToTimespec(int64(min(max(wait, 50*time.Microsecond), timerTick)))
		_ = unix.Nanosleep(&ts, nil)
	}
	s.mu.Lock()
	s.f.adminDown()
	s.sendLocked(time.Now()) // tell the peer this is no failure
	s.mu.Unlock()
}

// deliver applies a received packet (on the server's receiving thread).
func (s *Session) deliver(p Packet) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.stop.Load() {
		return
	}
	o := s.f.receive(now, &p)
	if o.dropped {
		s.dropped.Add(1)
		return
	}
	s.received.Add(1)
	s.afterLocked(o, now)
}

// afterLocked reports a state change and sends what the state machine
// asked at once; the periodic packets go on from there.
func (s *Session) afterLocked(o outcome, now time.Time) {
	if o.changed {
		s.since = now
		c := Change{Peer: s.cfg.Peer, From: o.from, To: s.f.state, Diag: s.f.diag, RemoteState: s.f.remoteState}
		switch {
		case c.To == StateUp:
			s.ups.Add(1)
		case c.From == StateUp:
			s.downs.Add(1)
		}
		select {
		case s.changes <- c:
		default: // the notifier is 64 changes behind: drop the report, not the session
		}
	}
	if o.send {
		s.sendLocked(now)
		s.next = now.Add(jitter(s.f.txInterval(), s.f.mult))
	}
}

// sendLocked writes the next Control packet, unless the remote asked for
// none.
func (s *Session) sendLocked(now time.Time) {
	if !s.f.mayTransmit() {
		return
	}
	p := s.f.packet()
	switch {
	case p.State != StateUp:
		s.lastTx = time.Time{}
	case !s.lastTx.IsZero():
		if gap := int64(now.Sub(s.lastTx)); gap > s.maxTxGap.Load() {
			s.maxTxGap.Store(gap)
		}
		fallthrough
	default:
		s.lastTx = now
	}
	p.Encode(&s.buf)
	if _, err := s.conn.Write(s.buf[:]); err != nil {
		s.sendErrors.Add(1) // ICMP unreachable while the peer is away: the timers go on
		return
	}
	s.sent.Add(1)
}

// close stops the session: one AdminDown packet, then its socket closes.
func (s *Session) close() {
	s.stop.Store(true)
	<-s.done
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.changes)
	<-s.notified
	s.conn.Close()
}

// Status is the session now.
func (s *Session) Status() SessionStatus {
	s.mu.Lock()
	st := SessionStatus{Config: s.cfg, State: s.f.state, RemoteState: s.f.remoteState, Diag: s.f.diag,
		LocalDiscr: s.f.localDiscr, RemoteDiscr: s.f.remoteDiscr, Since: s.since,
		TxInterval: s.f.txInterval(), DetectTime: s.f.detectTime()}
	s.mu.Unlock()
	st.Sent, st.Received, st.SendErrors, st.Dropped = s.sent.Load(), s.received.Load(), s.sendErrors.Load(), s.dropped.Load()
	st.Ups, st.Downs = s.ups.Load(), s.downs.Load()
	st.MaxTxGap = time.Duration(s.maxTxGap.Load())
	return st
}
