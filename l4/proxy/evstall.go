// A guard against a lost EPOLLOUT edge: a direction blocked on a
// destination that the kernel says can take bytes, with no edge for two
// looks a second apart, is counted, logged and moved on.
//
// It began as a safety net for stalls seen on kernel 6.18 over veth
// (TestSlowPeerBoundedMemory, about one run in three): a direction sat
// with bytes in its pipe, the destination's send queue empty, and no
// EPOLLOUT came. The cause was in l4lb: a short splice was taken for a
// full socket, but splice(2) from a pipe to a socket also returns short
// when a signal is pending (the Go runtime signals a loop's thread to
// preempt it), and then the socket has room and no edge follows
// (writePending, TestShortSpliceUnderSignals). Only EAGAIN now marks a
// destination full, and the guard counts none in any test or the soak.
//
// It stays, as a counted guard, because the price of a lost edge is a
// connection stalled for good, and its cost is small: one timer a second
// per loop while some direction is blocked, and one poll(2) a second per
// direction blocked for a whole second. It no longer mistakes a peer that
// reads slowly or not at all for a lost edge: poll(2) applies the
// kernel's own test (the same one that sends the edge: a third of the
// send buffer free), so a socket the peer does not drain never qualifies.

package proxy

import (
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// stallCheckEvery is how often a loop looks at blocked directions.
const stallCheckEvery = time.Second

// stallCheck is the loop's timer for blocked directions.
type stallCheck struct{}

func (stallCheck) pending(uint32) bool { return true }

func (stallCheck) onTimer(l *loop, _ uint32) {
	l.stall.armed = false
	blocked := false
	for c := range l.conns {
		if c.state != evOpen {
			continue
		}
		for _, d := range [2]*evDir{&c.up, &c.down} {
			if d.pending == 0 || d.dst.writable {
				d.suspect = false
				continue
			}
			blocked = true
			if d.lostEdge() {
				c.svc.Stats.LostWakeups.Add(1)
				c.svc.rateLog("a connection's destination could take bytes but never signalled it (lost wake-up): moved them on",
					zap.Stringer("client", c.flow.Src), zap.Bool("to_client", d == &c.down))
				d.dst.writable = true
				l.stall.kicks = append(l.stall.kicks, stallKick{c: c, gen: c.gen})
			}
		}
	}
	l.kick()
	if blocked {
		l.watchStalls()
	}
}

// lostEdge reports whether d, blocked on its destination, has moved
// nothing since the last look while the kernel said, at this look and the
// one before, that the destination can take bytes. The second look lets
// an edge that was on its way arrive (it moves bytes, which clears the
// suspicion).
func (d *evDir) lostEdge() bool {
	if d.n != d.stallMark {
		d.stallMark, d.suspect = d.n, false
		return false
	}
	if !canWrite(d.dst.fd) {
		d.suspect = false // full: the peer does not read
		return false
	}
	if !d.suspect {
		d.suspect = true
		return false
	}
	d.suspect = false
	return true
}

// stallKick is a connection the guard moves on, as it was when found.
type stallKick struct {
	c   *evConn
	gen uint32
}

// kick moves on the connections the guard found. Each was taken from
// l.conns first: a pump may end its connection (a peer that reset
// meanwhile), and nothing of an ended connection is touched after.
func (l *loop) kick() {
	for i, k := range l.stall.kicks {
		l.stall.kicks[i] = stallKick{}
		if k.c.gen != k.gen || k.c.state != evOpen {
			continue
		}
		if l.hooks.kick != nil {
			l.hooks.kick(k.c)
		}
		k.c.pump(l)
	}
	l.stall.kicks = l.stall.kicks[:0]
}

// canWrite reports whether poll(2) finds fd writable now.
func canWrite(fd int) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		n, err := unix.Poll(fds[:], 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n == 1 && fds[0].Revents&unix.POLLOUT != 0
	}
}

// watchStalls arms the loop's check of blocked directions, once.
func (l *loop) watchStalls() {
	if !l.stall.armed && !l.hooks.noStallCheck {
		l.stall.armed = true
		l.after(stallCheckEvery, stallCheck{}, 0)
	}
}

// loopHooks are fault-injection points for tests; nil or false in
// production.
type loopHooks struct {
	// kick runs as the guard moves a connection on, before its pump (a
	// test resets a peer there: the pump then ends the connection).
	kick func(c *evConn)
	// events may change the events epoll reported for one of a
	// connection's sockets before they are noted (a test drops an
	// EPOLLOUT edge there, as a kernel that lost it would).
	events func(c *evConn, backend bool, events uint32) uint32
	// noStallCheck turns the guard off (a test shows a stall it would
	// otherwise repair).
	noStallCheck bool
}
