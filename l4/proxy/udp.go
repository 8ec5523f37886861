// UDP VIP service: datagrams become sessions in a conntrack table, each
// with its own connected socket to the backend; the sessions run on the
// event loops (evudp.go).

package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// Batch sizes: a VIP socket reads up to vipBatch datagrams per syscall; a
// session reads up to replyBatch replies per syscall.
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
	// LogConnections writes one info line when a session ends (see
	// connlog.go), at most LogRate a second for the service (0 = no limit).
	// A session follows the value in force when it began.
	LogConnections bool
	LogRate        int
	// Access is the VIP's allow/deny list (nil = everyone); ClientLimits
	// its per-client limits (MaxOpen: max_sessions_per_client, Rate:
	// conn_rate_per_client). A datagram that would start a session for a
	// refused client is dropped and counted; sessions open when a reload
	// changes them go on.
	Access       *guard.ACL
	ClientLimits guard.Limits
}

// UDPStats are a UDP VIP's cumulative counters. Every datagram the VIP
// reads is forwarded or counted by one of the drop counters; the kernel's
// own drops on the VIP's sockets are read from them (QueueDrops).
type UDPStats struct {
	Datagrams atomic.Uint64 // client datagrams forwarded
	Replies   atomic.Uint64 // backend datagrams relayed to clients
	Truncated atomic.Uint64 // client datagrams too large for a UDP payload, dropped
	// Dropped counts datagrams a send did not take: to the backend (its
	// socket's buffer full, or an error such as an ICMP refusal), replies
	// sendmmsg did not take (the VIP socket's buffer full), and a
	// datagram for another loop's session after an upgrade.
	Dropped         atomic.Uint64
	SessionsCreated atomic.Uint64
	SessionsRefused atomic.Uint64 // datagrams from new clients dropped at max_sessions: no session slot
	// SocketErrors counts datagrams from new clients dropped because the
	// session's socket to the backend could not be opened: the
	// descriptor limit (EMFILE, ENFILE), kernel memory (ENOBUFS,
	// ENOMEM), or an error connecting it.
	SocketErrors atomic.Uint64
	// ReplyQueueDrops counts backend replies the kernel dropped because a
	// session socket's receive queue was full (the loop did not read them
	// fast enough); added when the session ends.
	ReplyQueueDrops atomic.Uint64
	NoBackend       atomic.Uint64 // datagrams dropped: no eligible backend
	BackendsFull    atomic.Uint64 // datagrams dropped: a new session found every backend at its max_sessions
	Moved           atomic.Uint64 // sessions moved off a backend that went down
	ReadErrors      atomic.Uint64
	ConnLogDropped  atomic.Uint64 // session log lines dropped over the rate limit
	Denied          atomic.Uint64 // datagrams dropped: the client is refused by allow/deny
	ClientLimited   atomic.Uint64 // datagrams dropped: a new session would break a per-client limit
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
	ev       *evUDP // the VIP's sockets and sessions on the event loops

	settings atomic.Pointer[UDPSettings]
	Stats    UDPStats
	sessions atomic.Int64
	clients  *guard.Clients // per-client session counts; they outlive reloads
	// startPaused: UDPConfig.Paused.
	startPaused bool
	tableMin    int // UDPConfig.tableMin, defaulted

	warnings rateLog
	silent   rateLog // unanswered sessions: every 10 s at most
	connLog  lineLimit

	serving atomic.Bool // Serve ran: Close waits for it
	done    chan struct{}
}

// UDPConfig builds a UDPService.
type UDPConfig struct {
	Conn *net.UDPConn
	// Group, instead of Conn, are the sockets of a SO_REUSEPORT group
	// another process passed (an upgrade), in its loop order; the service
	// owns them from then on, also when NewUDPService fails.
	Group []int
	// Paused: Serve does not read the VIP sockets until PauseReading(false)
	// (an upgrade's new process adopts the old one's sessions first).
	Paused    bool
	Snapshots *snapshot.Store
	Settings  UDPSettings
	Log       *zap.Logger
	Observer  Observer
	Self      *Listeners // every address l4lb listens on; nil = not checked
	// Loops run the VIP (required). With more than one loop, Conn must
	// have been opened with ListenOptions.ReusePort.
	Loops *Loops

	// tableMin is the least the session table holds (0 =
	// minSessionTable); tests lower it to reach the cap with few sockets.
	tableMin int
}

// minSessionTable is the least a session table holds, whatever
// max_sessions says: 64 shards of 1024, so a small max_sessions still
// spreads its sessions over every shard's lock.
const minSessionTable = 1 << 16

// sessionTableCap is the session table's cap for max_sessions: twice the
// sessions the VIP may hold, since the cap is per shard and sessions do
// not spread evenly, and at least min.
func sessionTableCap(maxSessions, min int) int {
	return max(2*maxSessions, min)
}

// NewUDPService makes a service over conn; Serve starts it.
func NewUDPService(cfg UDPConfig) (*UDPService, error) {
	if cfg.Loops == nil {
		closeAll(cfg.Group)
		return nil, errors.New("udp service: no event loops")
	}
	if len(cfg.Group) > 0 {
		return newUDPServiceGroup(cfg)
	}
	raw, err := cfg.Conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := newUDPBase(cfg, cfg.Conn.LocalAddr().(*net.UDPAddr).AddrPort())
	s.conn, s.raw = cfg.Conn, raw
	if err := s.enablePktinfo(); err != nil {
		return nil, err
	}
	if err := s.start(cfg, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// newUDPServiceGroup is NewUDPService over an inherited socket group.
func newUDPServiceGroup(cfg UDPConfig) (*UDPService, error) {
	sa, err := unix.Getsockname(cfg.Group[0])
	if err != nil {
		closeAll(cfg.Group)
		return nil, fmt.Errorf("udp socket group: %w", err)
	}
	s := newUDPBase(cfg, sockaddrAddrPort(sa))
	if err := s.start(cfg, cfg.Group); err != nil {
		return nil, err
	}
	return s, nil
}

// newUDPBase fills in what every UDP service has.
func newUDPBase(cfg UDPConfig, addr netip.AddrPort) *UDPService {
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	s := &UDPService{
		key:     l4.VIPKey{Addr: addr, Proto: l4.UDP},
		snaps:   cfg.Snapshots,
		log:     log,
		obs:     cfg.Observer,
		self:    cfg.Self,
		done:    make(chan struct{}),
		clients: guard.NewClients(0),
	}
	s.key.Addr = netip.AddrPortFrom(s.key.Addr.Addr().Unmap(), s.key.Addr.Port())
	s.connLog.lost = &s.Stats.ConnLogDropped
	s.wildcard = s.key.Addr.Addr().IsUnspecified()
	s.startPaused = cfg.Paused
	s.settings.Store(&cfg.Settings)
	s.silent.every = 10 * time.Second
	s.tableMin = cmp.Or(cfg.tableMin, minSessionTable)
	return s
}

// start makes the session table and the loops' sockets (group: the
// inherited ones, else the service's own and more of its group).
func (s *UDPService) start(cfg UDPConfig, group []int) error {
	var err error
	s.table, err = conntrack.New(conntrack.Options{
		UDPIdle:    cfg.Settings.SessionTimeout,
		MaxEntries: sessionTableCap(cfg.Settings.MaxSessions, s.tableMin),
		OnEnd:      s.sessionEndedLoop,
	})
	if err != nil {
		closeAll(group)
		return fmt.Errorf("session table: %w", err)
	}
	s.ev, err = newEvUDP(s, cfg.Loops, group)
	return err
}

// closeAll closes descriptors.
func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
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
// session, established ones included, from the table's next sweep. A
// MaxSessions above what the session table was sized for grows the table
// first (a table sized at start for a smaller one would evict sessions
// under the new limit); a lower one leaves it as it is, so sessions open
// over the new limit go on.
func (s *UDPService) Update(st UDPSettings) error {
	if old := s.settings.Load(); old == nil || old.SessionTimeout != st.SessionTimeout {
		if err := s.table.SetIdle(0, st.SessionTimeout); err != nil {
			return fmt.Errorf("session_timeout: %w", err)
		}
	}
	if want := sessionTableCap(st.MaxSessions, s.tableMin); want > s.table.MaxEntries() {
		if err := s.table.SetMaxEntries(want); err != nil {
			return fmt.Errorf("max_sessions: %w", err)
		}
	}
	s.settings.Store(&st)
	return nil
}

// Sessions returns the number of live sessions.
func (s *UDPService) Sessions() int64 { return s.sessions.Load() }

// Table exposes the session table's counters.
func (s *UDPService) Table() *conntrack.Table { return s.table }

// Serve puts the VIP's sockets on the loops and returns once the service
// is closed.
func (s *UDPService) Serve() {
	s.serving.Store(true)
	defer close(s.done)
	if err := s.table.Start(context.Background()); err != nil {
		s.log.Error("session table", zap.Error(err))
		return
	}
	s.serveLoops()
}

// rateLog logs at most one line per second from the datagram path.
func (s *UDPService) rateLog(msg string, fields ...zap.Field) {
	s.warnings.warn(s.log, msg, append(fields, zap.Stringer("listen", s.key))...)
}

// Close stops reading and ends every session.
func (s *UDPService) Close() error {
	s.closeLoops()
	if s.serving.Load() {
		<-s.done
	}
	return nil
}
