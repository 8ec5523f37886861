// The Server: the receiving sockets on UDP 3784, the GTSM check, and the
// dispatch of packets to sessions by discriminator or source address.

package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Options configure a Server; zero values mean the defaults.
type Options struct {
	// ListenPort is where packets are received (0: Port, 3784); PeerPort
	// where they are sent (0: Port). Tests set others.
	ListenPort, PeerPort uint16
	// ListenAddr4 and ListenAddr6 bind the receiving sockets (zero: the
	// wildcard address).
	ListenAddr4, ListenAddr6 netip.Addr
	// OnChange is called on every state change, from the session's
	// goroutine; it must not block for long.
	OnChange func(Change)
	Log      *zap.Logger
}

// Drops counts received datagrams that reached no session.
type Drops struct {
	Malformed uint64 // Decode refused them
	TTL       uint64 // TTL or hop limit not 255 (GTSM, RFC 5881 section 5)
	NoSession uint64 // no session has their discriminator or source address
}

// Server runs the sessions of one process.
type Server struct {
	opts Options
	log  *zap.Logger
	wg   sync.WaitGroup

	malformed, ttl, noSession atomic.Uint64

	closing atomic.Bool // the receiving threads stop

	mu       sync.Mutex // guards what follows
	sessions map[netip.Addr]*Session
	byDiscr  map[uint32]*Session
	rx4, rx6 int // the receiving sockets; -1 until the first session of the family
	closed   bool
}

// NewServer returns a server with no session; sockets open with the first
// session of their family.
func NewServer(opts Options) *Server {
	if opts.ListenPort == 0 {
		opts.ListenPort = Port
	}
	if opts.PeerPort == 0 {
		opts.PeerPort = Port
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	return &Server{opts: opts, log: opts.Log, sessions: map[netip.Addr]*Session{}, byDiscr: map[uint32]*Session{}, rx4: -1, rx6: -1}
}

// ErrClosed: the server was closed.
var ErrClosed = errors.New("bfd: server closed")

// Set makes the running sessions those of cfgs: new peers start, missing
// ones stop (sending AdminDown), changed ones restart.
func (s *Server) Set(cfgs []SessionConfig) error {
	want := map[netip.Addr]SessionConfig{}
	for _, c := range cfgs {
		c.Peer = c.Peer.Unmap()
		want[c.Peer] = c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for peer, sess := range s.sessions {
		if c, ok := want[peer]; !ok || c != sess.cfg {
			s.removeLocked(peer)
		}
	}
	var errs []error
	for peer, c := range want {
		if _, ok := s.sessions[peer]; ok {
			continue
		}
		if err := s.addLocked(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Server) addLocked(c SessionConfig) error {
	if c.Interval <= 0 || c.Multiplier == 0 {
		return fmt.Errorf("bfd: peer %v: interval %v and multiplier %d must be positive", c.Peer, c.Interval, c.Multiplier)
	}
	if err := s.listenLocked(c.Peer.Is4()); err != nil {
		return err
	}
	conn, err := dialSession(c, s.opts.PeerPort)
	if err != nil {
		return err
	}
	var discr uint32
	for discr == 0 || s.byDiscr[discr] != nil {
		discr = rand.Uint32()
	}
	sess := newSession(c, discr, conn, s.opts.OnChange)
	s.sessions[c.Peer] = sess
	s.byDiscr[discr] = sess
	go sess.run()
	s.log.Info("bfd session started", zap.Stringer("peer", c.Peer), zap.Duration("interval", c.Interval), zap.Uint8("multiplier", c.Multiplier))
	return nil
}

func (s *Server) removeLocked(peer netip.Addr) {
	sess := s.sessions[peer]
	delete(s.sessions, peer)
	delete(s.byDiscr, sess.f.localDiscr) // localDiscr never changes
	sess.close()
	s.log.Info("bfd session stopped", zap.Stringer("peer", peer))
}

// rxTimeout is how long the receiving thread blocks in recvmsg before
// it looks whether the server closed.
const rxTimeout = 100 * time.Millisecond

// listenLocked opens the receiving socket of the family (blocking, with
// TTL or hop limit reported on every datagram) and its thread.
func (s *Server) listenLocked(v4 bool) error {
	if (v4 && s.rx4 >= 0) || (!v4 && s.rx6 >= 0) {
		return nil
	}
	fd, err := rxSocket(v4, s.opts)
	if err != nil {
		return err
	}
	if v4 {
		s.rx4 = fd
	} else {
		s.rx6 = fd
	}
	s.wg.Add(1)
	go s.receive(fd)
	return nil
}

// rxSocket is a blocking UDP socket bound to the listen port, with
// IP_RECVTTL (IPV6_RECVHOPLIMIT), SO_REUSEPORT (the successor of `l4lb
// upgrade` binds while this process still runs) and a receive timeout.
func rxSocket(v4 bool, o Options) (int, error) {
	family, level, opt, addr := unix.AF_INET, unix.IPPROTO_IP, unix.IP_RECVTTL, o.ListenAddr4
	if !v4 {
		family, level, opt, addr = unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, o.ListenAddr6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("bfd: socket: %w", err)
	}
	tv := unix.NsecToTimeval(int64(rxTimeout))
	var sa unix.Sockaddr
	if v4 {
		sa4 := &unix.SockaddrInet4{Port: int(o.ListenPort)}
		if addr.IsValid() {
			sa4.Addr = addr.As4()
		}
		sa = sa4
	} else {
		sa6 := &unix.SockaddrInet6{Port: int(o.ListenPort)}
		if addr.IsValid() {
			sa6.Addr = addr.As16()
		}
		sa = sa6
	}
	for _, step := range []func() error{
		func() error { return unix.SetsockoptInt(fd, level, opt, 1) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) },
		func() error {
			if v4 {
				return nil
			}
			return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
		},
		func() error { return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv) },
		func() error { return unix.Bind(fd, sa) },
	} {
		if err := step(); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("bfd: listen on port %d: %w", o.ListenPort, err)
		}
	}
	return fd, nil
}

// receive reads datagrams on its own thread (locked, nice -20 where
// allowed, blocked in the kernel) and applies each to its session at
// once, until the server closes.
func (s *Server) receive(fd int) {
	runtime.LockOSThread() // the thread ends with the goroutine
	highPriority()
	defer s.wg.Done()
	var buf [512]byte
	var oob [128]byte
	for !s.closing.Load() {
		n, oobn, _, from, err := unix.Recvmsg(fd, buf[:], oob[:], 0)
		if err != nil {
			continue // the receive timeout (EAGAIN), an interrupt
		}
		if ttl, ok := receivedTTL(oob[:oobn]); !ok || ttl != TTL {
			s.ttl.Add(1)
			continue
		}
		p, err := Decode(buf[:n])
		if err != nil {
			s.malformed.Add(1)
			continue
		}
		src := sockaddrAddr(from)
		s.mu.Lock()
		var sess *Session
		if p.YourDiscr != 0 {
			sess = s.byDiscr[p.YourDiscr]
		} else {
			sess = s.sessions[src]
		}
		s.mu.Unlock()
		// Single hop: the session's peer is the packet's source.
		if sess == nil || sess.cfg.Peer != src {
			s.noSession.Add(1)
			continue
		}
		sess.deliver(p)
	}
}

// sockaddrAddr is the address of a received datagram's source.
func sockaddrAddr(sa unix.Sockaddr) netip.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr)
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap()
	}
	return netip.Addr{}
}

// receivedTTL reads the IP_TTL or IPV6_HOPLIMIT control message.
func receivedTTL(oob []byte) (int, bool) {
	for len(oob) >= unix.SizeofCmsghdr {
		l := int(binary.NativeEndian.Uint64(oob[0:8]))
		level := int32(binary.NativeEndian.Uint32(oob[8:12]))
		typ := int32(binary.NativeEndian.Uint32(oob[12:16]))
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0, false
		}
		data := oob[unix.CmsgLen(0):l]
		if len(data) >= 4 && ((level == unix.IPPROTO_IP && typ == unix.IP_TTL) || (level == unix.IPPROTO_IPV6 && typ == unix.IPV6_HOPLIMIT)) {
			return int(int32(binary.NativeEndian.Uint32(data))), true
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return 0, false
}

// Sessions returns every session's status.
func (s *Server) Sessions() []SessionStatus {
	s.mu.Lock()
	list := make([]*Session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		list = append(list, sess)
	}
	s.mu.Unlock()
	out := make([]SessionStatus, 0, len(list))
	for _, sess := range list {
		out = append(out, sess.Status())
	}
	return out
}

// Session returns the status of peer's session.
func (s *Server) Session(peer netip.Addr) (SessionStatus, bool) {
	s.mu.Lock()
	sess := s.sessions[peer.Unmap()]
	s.mu.Unlock()
	if sess == nil {
		return SessionStatus{}, false
	}
	return sess.Status(), true
}

// Drops returns the datagrams dropped before reaching a session.
func (s *Server) Drops() Drops {
	return Drops{Malformed: s.malformed.Load(), TTL: s.ttl.Load(), NoSession: s.noSession.Load()}
}

// Close stops every session (each sends AdminDown) and the sockets.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for peer := range s.sessions {
		s.removeLocked(peer)
	}
	s.mu.Unlock()
	s.closing.Store(true)
	s.wg.Wait() // within rxTimeout
	for _, fd := range []int{s.rx4, s.rx6} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
