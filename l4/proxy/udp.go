// UDP VIP service: datagrams become sessions in a conntrack table, each
// with its own connected socket to the backend.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// Batch sizes: the VIP socket reads up to vipBatch datagrams per syscall; a
// session relays up to replyBatch replies per syscall.
const (
	vipBatch   = 32
	replyBatch = 8
	bufSize    = maxDatagram + 1 // one spare byte so MSG_TRUNC flags oversize
)

// UDPSettings are a UDP VIP's tunables, swapped atomically on reload.
type UDPSettings struct {
	Name           string
	SessionTimeout time.Duration // idle time after which a session ends; a change applies to every session from the next sweep
	MaxSessions    int           // 0 = unlimited; past it new clients' datagrams are dropped and counted
	Responses      int           // end a session after this many replies; 0 = never
}

// UDPStats are a UDP VIP's cumulative counters.
type UDPStats struct {
	Datagrams       atomic.Uint64 // client datagrams forwarded
	Replies         atomic.Uint64 // backend datagrams relayed to clients
	Truncated       atomic.Uint64 // client datagrams too large for a UDP payload, dropped
	Dropped         atomic.Uint64 // datagrams dropped because a socket buffer was full
	SessionsCreated atomic.Uint64
	SessionsRefused atomic.Uint64 // new clients turned away at max_sessions
	NoBackend       atomic.Uint64 // datagrams dropped: no eligible backend
	Moved           atomic.Uint64 // sessions moved off a backend that went down
	ReadErrors      atomic.Uint64
}

// UDPService forwards one UDP VIP.
type UDPService struct {
	key      l4.VIPKey
	conn     *net.UDPConn
	raw      syscall.RawConn
	wildcard bool // listening on 0.0.0.0 or ::: replies must name their source
	snaps    *snapshot.Store
	table    *conntrack.Table
	log      *zap.Logger
	obs      Observer
	self     *Listeners
	replies  sync.Pool // *msgBatch for sessions' replies
	ev       *evUDP    // set when the VIP runs on event loops

	settings atomic.Pointer[UDPSettings]
	Stats    UDPStats
	sessions atomic.Int64

	// Owned by the Serve goroutine.
	batch    *msgBatch
	readFn   func(fd uintptr) bool
	nread    int
	readErr  error
	warnings rateLog

	wg      sync.WaitGroup // session goroutines
	serving atomic.Bool    // Serve ran: Close waits for its loop
	done    chan struct{}
}

// UDPConfig builds a UDPService.
type UDPConfig struct {
	Conn      *net.UDPConn
	Snapshots *snapshot.Store
	Settings  UDPSettings
	Log       *zap.Logger
	Observer  Observer
	Self      *Listeners // every address l4lb listens on; nil = not checked
	// Loops, when set, run the VIP on event loops: Conn must then have
	// been opened with ListenOptions.ReusePort when there is more than
	// one loop.
	Loops *Loops
}

// NewUDPService makes a service over conn; Serve starts it.
func NewUDPService(cfg UDPConfig) (*UDPService, error) {
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	raw, err := cfg.Conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &UDPService{
		key:   l4.VIPKey{Addr: cfg.Conn.LocalAddr().(*net.UDPAddr).AddrPort(), Proto: l4.UDP},
		conn:  cfg.Conn,
		raw:   raw,
		snaps: cfg.Snapshots,
		log:   log,
		obs:   cfg.Observer,
		self:  cfg.Self,
		batch: newMsgBatch(vipBatch, bufSize),
		done:  make(chan struct{}),
	}
	s.key.Addr = netip.AddrPortFrom(s.key.Addr.Addr().Unmap(), s.key.Addr.Port())
	s.wildcard = s.key.Addr.Addr().IsUnspecified()
	if err := s.enablePktinfo(); err != nil {
		return nil, err
	}
	s.replies.New = func() any { return newMsgBatch(replyBatch, bufSize) }
	s.readFn = s.readOnce
	s.settings.Store(&cfg.Settings)
	onEnd := s.sessionEnded
	if cfg.Loops != nil {
		onEnd = s.sessionEndedLoop
	}
	s.table, err = conntrack.New(conntrack.Options{
		UDPIdle:    cfg.Settings.SessionTimeout,
		MaxEntries: max(2*cfg.Settings.MaxSessions, 1<<16),
		OnEnd:      onEnd,
	})
	if err != nil {
		return nil, fmt.Errorf("session table: %w", err)
	}
	if cfg.Loops != nil {
		if s.ev, err = newEvUDP(s, cfg.Loops); err != nil {
			return nil, err
		}
		s.batch = nil // the loops have their own
	}
	return s, nil
}

// enablePktinfo asks for each datagram's destination address, which a
// wildcard listener needs to answer from the address the client used.
func (s *UDPService) enablePktinfo() error {
	if !s.wildcard {
		return nil
	}
	var serr error
	err := s.raw.Control(func(fd uintptr) {
		if s.key.Addr.Addr().Is4() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("packet info: %w", err)
	}
	return nil
}

// Key returns the VIP's listen address and protocol.
func (s *UDPService) Key() l4.VIPKey { return s.key }

// Update swaps in new settings. A new SessionTimeout applies to every
// session, established ones included, from the table's next sweep.
func (s *UDPService) Update(st UDPSettings) error {
	if old := s.settings.Load(); old == nil || old.SessionTimeout != st.SessionTimeout {
		if err := s.table.SetIdle(0, st.SessionTimeout); err != nil {
			return fmt.Errorf("session_timeout: %w", err)
		}
	}
	s.settings.Store(&st)
	return nil
}

// Sessions returns the number of live sessions.
func (s *UDPService) Sessions() int64 { return s.sessions.Load() }

// Table exposes the session table's counters.
func (s *UDPService) Table() *conntrack.Table { return s.table }

// Serve reads client datagrams until Close.
func (s *UDPService) Serve() {
	s.serving.Store(true)
	defer close(s.done)
	if err := s.table.Start(context.Background()); err != nil {
		s.log.Error("session table", zap.Error(err))
		return
	}
	if s.ev != nil {
		s.serveLoops()
		return
	}
	for {
		n, err := s.readBatch()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.Stats.ReadErrors.Add(1)
			s.rateLog("udp read failed", zap.Error(err))
			continue
		}
		for i := 0; i < n; i++ {
			s.handle(i)
		}
	}
}

func (s *UDPService) readBatch() (int, error) {
	s.nread, s.readErr = 0, nil
	if err := s.raw.Read(s.readFn); err != nil {
		return 0, err
	}
	return s.nread, s.readErr
}

// readOnce is the RawConn read callback: false parks until readable.
func (s *UDPService) readOnce(fd uintptr) bool {
	s.batch.prepRecv(vipBatch, true, s.wildcard)
	n, err := recvmmsg(int(fd), s.batch.hdrs)
	if err == unix.EAGAIN || err == unix.EINTR {
		return false
	}
	s.nread, s.readErr = n, err
	return true
}

// handle forwards datagram i of the read batch.
func (s *UDPService) handle(i int) {
	b := s.batch
	if b.truncated(i) {
		s.Stats.Truncated.Add(1)
		return
	}
	dst := s.key.Addr.Addr()
	if s.wildcard {
		if d, ok := b.destination(i); ok {
			dst = d
		}
	}
	flow := l4.Flow{Src: b.source(i), Dst: netip.AddrPortFrom(dst, s.key.Addr.Port()), Proto: l4.UDP}
	key := conntrack.KeyOf(&flow)
	sess := s.session(key)
	if sess == nil {
		// flow goes by value: its address escapes only on this path, so
		// a datagram of an existing session allocates nothing.
		if sess = s.newSession(key, flow); sess == nil {
			return
		}
	}
	sess.forward(b.payload(i))
}

// session returns the live session of key, ending it first if its backend
// is no longer eligible (the datagram then starts a new one).
func (s *UDPService) session(key conntrack.Key) *udpSession {
	e, ok := s.table.Lookup(key)
	if !ok {
		return nil
	}
	sess := e.Owner.(*udpSession)
	if !e.Backend.Eligible() {
		s.Stats.Moved.Add(1)
		s.table.Delete(key)
		return nil
	}
	return sess
}

func (s *UDPService) newSession(key conntrack.Key, f l4.Flow) *udpSession {
	flow := &f
	st := s.settings.Load()
	if st.MaxSessions > 0 && s.sessions.Load() >= int64(st.MaxSessions) {
		s.Stats.SessionsRefused.Add(1)
		s.rateLog("max_sessions reached: datagram from a new client dropped", zap.Int("max_sessions", st.MaxSessions))
		return nil
	}
	b := s.snaps.Load().Pick(flow, nil)
	if b == nil {
		s.Stats.NoBackend.Add(1)
		s.rateLog("no usable backend for VIP: datagram dropped")
		return nil
	}
	sess, err := s.dialSession(key, flow, b)
	if err != nil {
		if !b.Release() {
			s.log.Error("live-flow count underflow: a flow was released twice", zap.String("backend", string(b.ID)))
		}
		if s.obs != nil && !localFailure(err) {
			s.obs.ConnectFailed(b, err)
		}
		s.rateLog("backend socket failed", zap.String("backend", string(b.ID)), zap.Error(err))
		return nil
	}
	s.sessions.Add(1)
	s.wg.Add(1)
	if _, inserted, err := s.table.Insert(key, b, sess); !inserted {
		// Only a closed table refuses (this goroutine is the only inserter);
		// Insert released the count.
		sess.conn.Close()
		s.sessions.Add(-1)
		s.wg.Done()
		s.rateLog("session not recorded", zap.Error(err))
		return nil
	}
	s.Stats.SessionsCreated.Add(1)
	b.Stats.Flows.Add(1)
	go sess.relayReplies()
	return sess
}

// sessionEnded is the table's end hook: the session's socket closes and its
// reply goroutine exits.
func (s *UDPService) sessionEnded(_ conntrack.Key, e conntrack.Entry, _ conntrack.Reason) {
	if sess, ok := e.Owner.(*udpSession); ok {
		sess.conn.Close()
	}
}

// rateLog logs at most one line per second from the datagram path.
func (s *UDPService) rateLog(msg string, fields ...zap.Field) {
	s.warnings.warn(s.log, msg, append(fields, zap.Stringer("listen", s.key))...)
}

// Close stops reading, ends every session and waits for their goroutines.
func (s *UDPService) Close() error {
	if s.ev != nil {
		s.closeLoops()
		if s.serving.Load() {
			<-s.done
		}
		return nil
	}
	err := s.conn.Close()
	if s.serving.Load() {
		<-s.done
	}
	_ = s.table.Close()
	s.wg.Wait()
	return err
}
