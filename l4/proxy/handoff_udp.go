// UDP sessions handed to another process (an upgrade): each session's
// connected backend socket and its conntrack entry, so that a flow keeps
// its backend. None of this runs outside an upgrade.

package proxy

import (
	"errors"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/l4"
)

// SessionState is a UDP session as the next process needs it, besides its
// backend socket.
type SessionState struct {
	VIP         string         `json:"vip"` // l4.VIPKey.String()
	Client      netip.AddrPort `json:"client"`
	Local       netip.AddrPort `json:"local"` // the VIP address the client sent to
	Backend     l4.BackendID   `json:"backend"`
	BackendAddr netip.AddrPort `json:"backend_addr"`
	Loop        int            `json:"loop"`              // the loop (and VIP socket of the group) that owns it
	Sent        int            `json:"sent,omitempty"`    // replies relayed (udp_responses counts them)
	Replied     bool           `json:"replied,omitempty"` // the backend answered once
}

// DetachedSession is a session whose backend socket left its loop's epoll
// set: replies wait in the socket. FD is a duplicate for the next process.
type DetachedSession struct {
	State SessionState
	FD    int
	s     *UDPService
	sess  *loopSession
	gen   uint32
}

// DetachSessions takes every session of svcs off their loops. The VIP
// sockets must not be read any more (PauseReading): no datagram can start
// or use a session meanwhile.
func DetachSessions(svcs []*UDPService) []*DetachedSession {
	var out []*DetachedSession
	for _, s := range svcs {
		out = append(out, s.detachSessions()...)
	}
	return out
}

func (s *UDPService) detachSessions() []*DetachedSession {
	byLoop := map[*loop][]*DetachedSession{}
	s.table.Range(func(_ conntrack.Key, e conntrack.Peeked) bool {
		if sess, ok := e.Owner.(*loopSession); ok {
			byLoop[sess.owner] = append(byLoop[sess.owner], &DetachedSession{s: s, sess: sess, gen: sess.gen, FD: -1})
		}
		return true
	})
	var mu sync.Mutex
	var out []*DetachedSession
	s.ev.loops.each(func(l *loop) {
		var mine []*DetachedSession
		for _, d := range byLoop[l] {
			if d.detach(l) {
				mine = append(mine, d)
			}
		}
		mu.Lock()
		out = append(out, mine...)
		mu.Unlock()
	})
	return out
}

// detach, on the session's loop, takes its socket out of the epoll set and
// duplicates it; false if the session ended meanwhile.
func (d *DetachedSession) detach(l *loop) bool {
	sess := d.sess
	if sess.gen != d.gen || !sess.open || sess.reg.slot < 0 {
		return false
	}
	fd, err := dupFD(sess.reg.fd)
	if err != nil {
		return false
	}
	l.withdraw(&sess.reg)
	sess.readable = false // an again turn queued before finds nothing to do
	d.FD = fd
	d.State = SessionState{
		VIP: d.s.key.String(), Client: sess.client, Local: netip.AddrPortFrom(d.s.key.Addr.Addr(), d.s.key.Addr.Port()),
		Backend: sess.backend.ID, BackendAddr: sess.backend.Addr, Loop: l.id, Sent: sess.sent, Replied: sess.replied,
	}
	if sess.replySrc.IsValid() {
		d.State.Local = netip.AddrPortFrom(sess.replySrc, d.s.key.Addr.Port())
	}
	return true
}

// ReleaseSessions ends sessions here once the next process holds their
// sockets (or refused them): the entries go, this process's descriptors
// close, and the sockets live on wherever they were taken.
func ReleaseSessions(ds []*DetachedSession) {
	for _, d := range ds {
		unix.Close(d.FD)
		if d.sess.gen == d.gen && d.sess.open {
			d.s.table.Delete(d.sess.key) // its loop closes the socket
		}
	}
}

// RestoreSessions puts detached sessions back on their loops.
func RestoreSessions(ds []*DetachedSession) {
	for _, d := range ds {
		unix.Close(d.FD)
		l := d.sess.owner
		l.post(func() {
			sess := d.sess
			if sess.gen != d.gen || !sess.open || sess.reg.slot >= 0 {
				return
			}
			r, err := l.add(sess.reg.fd, udpEvents, sess)
			if err != nil {
				d.s.table.Delete(sess.key)
				return
			}
			sess.reg, sess.readable = r, true
			sess.relay(l)
		})
	}
}

// errSessionExists: the new process has a session for the flow already.
var errSessionExists = errors.New("a session for this client exists already")

// AdoptSession takes over a session another process detached: fd is its
// backend socket (owned from now on, also on an error), b its backend
// here. The session joins the table (holding a live flow on b) and the
// loop that reads the same VIP socket of the group as before, and relays
// the replies that waited meanwhile.
func (s *UDPService) AdoptSession(st SessionState, fd int, b *l4.Backend) error {
	loops := s.ev.loops.loops
	l := loops[st.Loop%len(loops)]
	flow := l4.Flow{Src: st.Client, Dst: st.Local, Proto: l4.UDP}
	key := conntrack.KeyOf(&flow)
	errc := make(chan error, 1)
	l.post(func() { errc <- s.adoptSessionOn(l, st, key, fd, b) })
	return <-errc
}

func (s *UDPService) adoptSessionOn(l *loop, st SessionState, key conntrack.Key, fd int, b *l4.Backend) error {
	sess := l.newSession()
	*sess = loopSession{s: s, owner: l, key: key, client: st.Client, backend: b, gen: sess.gen, sent: st.Sent, replied: st.Replied}
	if s.wildcard {
		sess.replySrc = st.Local.Addr()
	}
	r, err := l.add(fd, udpEvents, sess)
	if err != nil {
		l.freeSession(sess)
		unix.Close(fd)
		return err
	}
	sess.reg, sess.open = r, true
	l.shared.sessions.Add(1)
	s.sessions.Add(1)
	b.Acquire() // the table owns this count
	if _, inserted, err := s.table.Insert(key, b, sess); !inserted {
		s.closeSession(l, sess, l4.EndLocalError)
		if err == nil {
			err = errSessionExists
		}
		return err
	}
	sess.readable = true // replies may have queued meanwhile
	sess.relay(l)
	return nil
}
