// The Syncer: its socket, the sending rounds and the receiving loop.

package flowsync

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4/plane"
)

// Options configure a Syncer ([flow_sync]).
type Options struct {
	Listen     netip.AddrPort
	Peers      []netip.AddrPort
	Key        []byte
	Interval   time.Duration
	MaxRate    int // flows sent per second, and flows installed per second
	MaxEntries int // entries from peers the table may hold
	// Table returns the flow table now; nil while there is none (no xdp
	// VIP runs).
	Table func() plane.FlowTable
	Log   *zap.Logger
}

// Syncer sends this balancer's pinned flows to its peers and installs
// theirs.
type Syncer struct {
	opts   Options
	log    *zap.Logger
	conn   *net.UDPConn
	sender uint64
	stop   chan struct{}
	done   chan struct{}

	// fromPeers is the table's entries from peers: the last round's
	// count, plus what was installed since.
	fromPeers atomic.Int64
	c         counters
}

type counters struct {
	sent, datagramsSent, sendErrors, sendLimited                    atomic.Uint64
	datagrams, installed, known, foreignVIP, unknownBackend, failed atomic.Uint64
	malformed, badVersion, badAuth, replays, badEntries             atomic.Uint64
	installLimited, tableFull                                       atomic.Uint64
}

// Start opens the socket and runs the loops.
func Start(o Options) (*Syncer, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Interval <= 0 || o.MaxRate <= 0 || o.MaxEntries <= 0 || len(o.Key) == 0 || o.Table == nil {
		return nil, errors.New("flowsync: interval, max_rate, max_entries, a key and a table are required")
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	// SO_REUSEPORT: the successor of `l4lb upgrade` binds while this
	// process still runs; both install into the same maps meanwhile.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", o.Listen.String())
	if err != nil {
		return nil, fmt.Errorf("flowsync: listen %s: %w", o.Listen, err)
	}
	s := &Syncer{opts: o, log: o.Log, conn: pc.(*net.UDPConn), sender: binary.BigEndian.Uint64(id[:]) | 1,
		stop: make(chan struct{}), done: make(chan struct{})}
	recvDone := make(chan struct{})
	go func() { defer close(recvDone); s.receive() }()
	go func() {
		defer close(s.done)
		s.send()
		s.conn.Close()
		<-recvDone
	}()
	s.log.Info("flow sync running", zap.Stringer("listen", o.Listen), zap.Int("peers", len(o.Peers)), zap.Duration("interval", o.Interval))
	return s, nil
}

// Close stops the loops and closes the socket.
func (s *Syncer) Close() {
	if s == nil {
		return
	}
	close(s.stop)
	<-s.done
}

// send runs a round every interval until Close.
func (s *Syncer) send() {
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	enc := newCodec(s.opts.Key)
	buf := make([]byte, MaxLen)
	batch := make([]plane.SyncedFlow, 0, MaxEntries)
	var seq uint64
	flush := func() {
		if len(batch) == 0 {
			return
		}
		seq++
		n := enc.encode(buf, Header{Sender: s.sender, Seq: seq, Time: time.Now().UnixNano()}, batch)
		for _, p := range s.opts.Peers {
			if _, err := s.conn.WriteToUDPAddrPort(buf[:n], p); err != nil {
				s.c.sendErrors.Add(1)
				continue
			}
			s.c.datagramsSent.Add(1)
		}
		s.c.sent.Add(uint64(len(batch)))
		batch = batch[:0]
	}
	budget := max(int(int64(s.opts.MaxRate)*int64(s.opts.Interval)/int64(time.Second)), 1)
	// A flow's last-seen time lags its last packet by up to 640ms (the
	// program refreshes it at most every 64 jiffies): look back further
	// than one round.
	within := 2*s.opts.Interval + time.Second
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		t := s.opts.Table()
		if t == nil {
			continue
		}
		left := budget
		fromPeers, err := t.PinnedFlows(within, func(f plane.SyncedFlow) bool {
			if left == 0 {
				s.c.sendLimited.Add(1)
				return true
			}
			left--
			batch = append(batch, f)
			if len(batch) == MaxEntries {
				flush()
			}
			return true
		})
		flush()
		if err != nil {
			s.log.Warn("flow sync: reading the flow table", zap.Error(err))
			continue
		}
		s.fromPeers.Store(int64(fromPeers))
	}
}

// receive reads datagrams until the socket closes.
func (s *Syncer) receive() {
	dec := newCodec(s.opts.Key)
	rp := newReplays(s.sender)
	buf := make([]byte, MaxLen+1)
	flows := make([]plane.SyncedFlow, 0, MaxEntries)
	results := make([]plane.InstallResult, MaxEntries)
	rate := float64(s.opts.MaxRate)
	tokens, last := rate, time.Now()
	for {
		n, _, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.c.datagrams.Add(1)
		h, entries, err := dec.decode(buf[:n])
		switch {
		case errors.Is(err, ErrVersion):
			s.c.badVersion.Add(1)
			continue
		case errors.Is(err, ErrAuth):
			s.c.badAuth.Add(1)
			continue
		case err != nil:
			s.c.malformed.Add(1)
			continue
		}
		now := time.Now()
		if !rp.check(h, now) {
			s.c.replays.Add(1)
			continue
		}
		flows = flows[:0]
		for i := range len(entries) / EntryLen {
			f, ok := entry(entries, i)
			if !ok {
				s.c.badEntries.Add(1)
				continue
			}
			flows = append(flows, f)
		}
		// The install rate: a token bucket of max_rate a second.
		tokens = min(rate, tokens+now.Sub(last).Seconds()*rate)
		last = now
		if take := min(len(flows), int(tokens)); take < len(flows) {
			s.c.installLimited.Add(uint64(len(flows) - take))
			flows = flows[:take]
		}
		tokens -= float64(len(flows))
		// The table cap.
		if room := int64(s.opts.MaxEntries) - s.fromPeers.Load(); int64(len(flows)) > room {
			keep := max(room, 0)
			s.c.tableFull.Add(uint64(int64(len(flows)) - keep))
			flows = flows[:keep]
		}
		t := s.opts.Table()
		if len(flows) == 0 || t == nil {
			continue
		}
		t.InstallFlows(flows, results)
		for _, r := range results[:len(flows)] {
			switch r {
			case plane.Installed:
				s.c.installed.Add(1)
				s.fromPeers.Add(1)
			case plane.InstallKnown:
				s.c.known.Add(1)
			case plane.InstallForeignVIP:
				s.c.foreignVIP.Add(1)
			case plane.InstallUnknownBackend:
				s.c.unknownBackend.Add(1)
			default:
				s.c.failed.Add(1)
			}
		}
	}
}

// Status is the sync's counters now.
func (s *Syncer) Status() *plane.FlowSyncStatus {
	if s == nil {
		return nil
	}
	peers := make([]string, len(s.opts.Peers))
	for i, p := range s.opts.Peers {
		peers[i] = p.String()
	}
	c := &s.c
	return &plane.FlowSyncStatus{
		Listen: s.opts.Listen.String(), Peers: peers, Interval: s.opts.Interval,
		Sent: c.sent.Load(), DatagramsSent: c.datagramsSent.Load(), SendErrors: c.sendErrors.Load(), SendRateLimited: c.sendLimited.Load(),
		Datagrams: c.datagrams.Load(), Installed: c.installed.Load(), Known: c.known.Load(), ForeignVIP: c.foreignVIP.Load(),
		UnknownBackend: c.unknownBackend.Load(), InstallFailed: c.failed.Load(),
		Malformed: c.malformed.Load() + c.badEntries.Load(), BadVersion: c.badVersion.Load(), BadAuth: c.badAuth.Load(), Replays: c.replays.Load(),
		InstallRateLimited: c.installLimited.Load(), TableFull: c.tableFull.Load(), FromPeers: max(s.fromPeers.Load(), 0),
	}
}
