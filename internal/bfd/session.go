// One BFD session: its sending socket, its timers (with jitter) and the
// state machine they drive.

package bfd

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
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
	Dropped     uint64 // received and discarded (A bit, session AdminDown, full queue)
	Ups, Downs  uint64 // transitions into Up, and from Up to Down
	// MaxTxGap is the longest time between two packets sent while the
	// session was up: near the interval, unless this process was not
	// scheduled (a gap past the router's detection time takes the
	// session down there).
	MaxTxGap time.Duration
}

// Session is one running session.
type Session struct {
	cfg      SessionConfig
	conn     *net.UDPConn
	onChange func(Change)
	rx       chan Packet
	stop     chan struct{}
	done     chan struct{}

	sent, received, sendErrors, dropped, ups, downs atomic.Uint64
	maxTxGap                                        atomic.Int64
	lastTx                                          time.Time // owned by run

	mu    sync.Mutex // guards what follows
	f     fsm
	since time.Time
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
	return &Session{cfg: cfg, conn: conn, onChange: onChange, rx: make(chan Packet, 16),
		stop: make(chan struct{}), done: make(chan struct{}),
		f: newFSM(discr, cfg.Interval, cfg.Multiplier), since: time.Now()}
}

// deliver hands a received packet to the session; a full queue drops it.
func (s *Session) deliver(p Packet) {
	select {
	case s.rx <- p:
	default:
		s.dropped.Add(1)
	}
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

func (s *Session) run() {
	defer close(s.done)
	var buf [PacketLen]byte
	tx := time.NewTimer(0)
	defer tx.Stop()
	detect := time.NewTimer(time.Hour)
	detect.Stop()
	defer detect.Stop()
	for {
		select {
		case <-s.stop:
			s.mu.Lock()
			s.f.adminDown()
			s.mu.Unlock()
			s.send(&buf) // tell the peer this is no failure
			return
		case p := <-s.rx:
			now := time.Now()
			s.mu.Lock()
			o := s.f.receive(now, &p)
			dt := s.f.detectTime()
			s.mu.Unlock()
			if o.dropped {
				s.dropped.Add(1)
				continue
			}
			s.received.Add(1)
			if dt > 0 {
				detect.Reset(dt)
			}
			s.after(o, now, &buf, tx)
		case <-detect.C:
			now := time.Now()
			s.mu.Lock()
			o := s.f.expire(now)
			dt, last := s.f.detectTime(), s.f.lastRx
			s.mu.Unlock()
			if dt > 0 { // a packet came in between: wait the rest
				detect.Reset(dt - now.Sub(last))
			}
			s.after(o, now, &buf, tx)
		case <-tx.C:
			s.send(&buf)
			s.mu.Lock()
			next := jitter(s.f.txInterval(), s.f.mult)
			s.mu.Unlock()
			tx.Reset(next)
		}
	}
}

// after reports a state change and sends what the state machine asked.
func (s *Session) after(o outcome, now time.Time, buf *[PacketLen]byte, tx *time.Timer) {
	if o.changed {
		s.mu.Lock()
		s.since = now
		c := Change{Peer: s.cfg.Peer, From: o.from, To: s.f.state, Diag: s.f.diag, RemoteState: s.f.remoteState}
		s.mu.Unlock()
		switch {
		case c.To == StateUp:
			s.ups.Add(1)
		case c.From == StateUp:
			s.downs.Add(1)
		}
		if s.onChange != nil {
			s.onChange(c)
		}
	}
	if o.send {
		s.send(buf)
		// The periodic packets go on at the (maybe new) rate from here.
		s.mu.Lock()
		next := jitter(s.f.txInterval(), s.f.mult)
		s.mu.Unlock()
		tx.Reset(next)
	}
}

// send writes the next Control packet, unless the remote asked for none.
func (s *Session) send(buf *[PacketLen]byte) {
	s.mu.Lock()
	if !s.f.mayTransmit() {
		s.mu.Unlock()
		return
	}
	p := s.f.packet()
	s.mu.Unlock()
	now := time.Now()
	if p.State == StateUp && !s.lastTx.IsZero() {
		if gap := int64(now.Sub(s.lastTx)); gap > s.maxTxGap.Load() {
			s.maxTxGap.Store(gap)
		}
	}
	s.lastTx = now
	p.Encode(buf)
	if _, err := s.conn.Write(buf[:]); err != nil {
		s.sendErrors.Add(1) // ICMP unreachable while the peer is away: the timers go on
		return
	}
	s.sent.Add(1)
}

// close stops the session: one AdminDown packet, then its socket closes.
func (s *Session) close() {
	close(s.stop)
	<-s.done
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
