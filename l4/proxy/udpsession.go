// A UDP session: one client 5-tuple, one connected socket to its backend,
// and the goroutine that relays the backend's replies to the client.
package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
)

type udpSession struct {
	svc      *UDPService
	key      conntrack.Key
	client   netip.AddrPort
	replySrc netip.Addr // source address for replies when the VIP is a wildcard
	backend  *l4.Backend
	conn     *net.UDPConn
	raw      syscall.RawConn

	// Used only by the VIP's Serve goroutine.
	out     []byte
	writeFn func(fd uintptr) bool

	// Used only by the session's reply goroutine.
	batch   *msgBatch
	n       int
	err     error
	readFn  func(fd uintptr) bool
	replyFn func(fd uintptr) bool
	sent    int
	replied bool // the backend answered once: Observer.ConnectOK was told
}

func (s *UDPService) dialSession(key conntrack.Key, flow *l4.Flow, b *l4.Backend) (*udpSession, error) {
	network := "udp4"
	if b.Addr.Addr().Is6() {
		network = "udp6"
	}
	if s.self.wouldLoop(l4.UDP, b.Addr) {
		return nil, fmt.Errorf("%s: %w", b.Addr, errSelfConnect)
	}
	conn, err := net.DialUDP(network, nil, net.UDPAddrFromAddrPort(b.Addr))
	if err != nil {
		return nil, err
	}
	if s.self.loops(l4.UDP, conn.LocalAddr().(*net.UDPAddr).AddrPort(), b.Addr) {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", b.Addr, errSelfConnect)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	sess := &udpSession{svc: s, key: key, client: flow.Src, backend: b, conn: conn, raw: raw}
	if s.wildcard {
		sess.replySrc = flow.Dst.Addr()
	}
	// Method values bound once per session: the per-datagram calls through
	// RawConn then allocate nothing.
	sess.writeFn, sess.readFn, sess.replyFn = sess.writeOnce, sess.readOnce, sess.replyOnce
	return sess, nil
}

// forward sends one client datagram to the backend without waiting: if the
// socket buffer is full the datagram is dropped and counted, as a router
// would, so one slow backend never stalls the VIP.
func (sess *udpSession) forward(p []byte) {
	sess.out = p
	if err := sess.raw.Write(sess.writeFn); err != nil {
		sess.svc.Stats.Dropped.Add(1)
		return
	}
	sess.svc.Stats.Datagrams.Add(1)
	sess.backend.Stats.BytesIn.Add(uint64(len(p)))
}

func (sess *udpSession) writeOnce(fd uintptr) bool {
	for {
		_, err := unix.Write(int(fd), sess.out)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			sess.svc.Stats.Dropped.Add(1)
		}
		return true
	}
}

// relayReplies runs until the session's socket is closed (expiry, delete,
// shutdown) or the session reached its reply limit.
func (sess *udpSession) relayReplies() {
	s := sess.svc
	defer s.wg.Done()
	defer s.sessions.Add(-1)
	for {
		n, err := sess.readReplies()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			sess.readFailed(err)
			continue
		}
		sess.relay(n)
		if !sess.replied && n > 0 && s.obs != nil {
			sess.replied = true
			s.obs.ConnectOK(sess.backend, 0) // a passive success: the backend lives
		}
		if limit := s.settings.Load().Responses; limit > 0 && sess.sent >= limit {
			s.table.Delete(sess.key)
			return
		}
		s.table.Lookup(sess.key) // replies keep the session alive too
	}
}

// readFailed handles an error on the backend socket: ICMP port unreachable
// surfaces as ECONNREFUSED on a connected UDP socket, a passive health mark.
func (sess *udpSession) readFailed(err error) {
	s := sess.svc
	s.Stats.ReadErrors.Add(1)
	if errors.Is(err, unix.ECONNREFUSED) && s.obs != nil {
		s.obs.ConnectFailed(sess.backend, err)
	}
}

// readReplies waits until the backend socket is readable, then borrows a
// batch from the pool and reads what is there; an idle session holds none.
func (sess *udpSession) readReplies() (int, error) {
	sess.n, sess.err = 0, nil
	if err := sess.raw.Read(sess.readFn); err != nil {
		return 0, err
	}
	return sess.n, sess.err
}

func (sess *udpSession) readOnce(fd uintptr) bool {
	if sess.batch == nil {
		sess.batch = sess.svc.replies.Get().(*msgBatch)
	}
	sess.batch.prepRecv(replyBatch, false, false)
	n, err := recvmmsg(int(fd), sess.batch.hdrs)
	if err == unix.EAGAIN || err == unix.EINTR {
		sess.svc.replies.Put(sess.batch)
		sess.batch = nil
		return false
	}
	sess.n, sess.err = n, err
	if err != nil {
		sess.svc.replies.Put(sess.batch)
		sess.batch = nil
	}
	return true
}

// relay sends the n replies in the borrowed batch to the client from the
// VIP socket, then returns the batch.
func (sess *udpSession) relay(n int) {
	s := sess.svc
	b := sess.batch
	out := 0
	for i := 0; i < n; i++ {
		if b.truncated(i) {
			s.Stats.Truncated.Add(1)
			continue
		}
		size := int(b.hdrs[i].Len)
		if out != i {
			copy(b.buf(out), b.payload(i))
		}
		b.prepSend(out, size, sess.client, sess.replySrc)
		sess.backend.Stats.BytesOut.Add(uint64(size))
		out++
	}
	sess.n = out
	if out > 0 {
		if err := s.raw.Write(sess.replyFn); err != nil {
			s.Stats.Dropped.Add(uint64(out))
		}
	}
	s.replies.Put(b)
	sess.batch = nil
}

// replyOnce is the VIP socket's write callback: it sends what is left of
// the batch, waiting for writability when the socket buffer is full.
func (sess *udpSession) replyOnce(fd uintptr) bool {
	s := sess.svc
	for sess.n > 0 {
		sent, err := sendmmsg(int(fd), sess.batch.hdrs[:sess.n])
		if err == unix.EAGAIN {
			return false
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			s.Stats.Dropped.Add(uint64(sess.n))
			return true
		}
		s.Stats.Replies.Add(uint64(sent))
		sess.sent += sent
		// The headers carry their own buffer pointers, so shifting them
		// keeps each with its data; prepRecv and prepSend re-point them.
		copy(sess.batch.hdrs, sess.batch.hdrs[sent:sess.n])
		sess.n -= sent
	}
	return true
}
