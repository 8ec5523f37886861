// The watch of hung backends (stall_timeout): once a second, each loop
// looks at a VIP's open connections, and a backend whose connections wait
// for replies that do not come is reported degraded.
//
// A handshake probe cannot see a hung server process: the kernel
// completes handshakes from the listen backlog and acknowledges requests
// into the receive buffer of a process that is stopped (SIGSTOP), stuck
// on a lock or a full disk. TCP_INFO of the backend socket shows nothing
// wrong then (unacked 0, an open window, no retransmission); what does
// show is that no byte comes back. So a connection stalls when the
// client's bytes were written to the backend after the backend's last
// byte back (a request waits) and none has come back for stall_timeout.
// A backend is degraded when at least one of its connections stalls and
// none of its connections got a byte back since that stalled request was
// sent: the server has answered nothing for stall_timeout while it held
// a request. A stalled connection next to others that got replies after
// it asked is a long request on a live server, however quiet they are
// now: the rule looks at the order of requests and replies, not at how
// long ago the last reply came, which a pause of the clients between
// requests (or of l4lb's host) stretches past any stall_timeout. It is back at
// the first byte back on any of its connections (SIGCONT), or once it has
// had no stalled connection and no reply for stall_timeout (nothing left
// to tell: new connections may try it again).
//
// Its cost: nothing per byte beyond the time each direction already noted
// for the idle timer (evDir.at); per look, one task on each loop that
// walks its connections, and one getsockopt(TCP_INFO) per stalled
// connection for the evidence the report carries. A VIP without
// stall_timeout runs no watch.

package proxy

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// stallLookEvery is how often the watch looks (at most: half the
// stall_timeout when that is shorter).
const stallLookEvery = time.Second

// stallWatch runs a service's watch goroutine while stall_timeout is on.
type stallWatch struct {
	mu   sync.Mutex
	stop chan struct{} // closed to end the running watch; nil: none runs
	done chan struct{} // closed when it has ended
}

// set starts (on) or stops the watch of s.
func (w *stallWatch) set(s *TCPService, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case on && w.stop == nil:
		w.stop, w.done = make(chan struct{}), make(chan struct{})
		go s.watchStalls(w.stop, w.done)
	case !on && w.stop != nil:
		close(w.stop)
		w.stop = nil
	}
}

// halt stops the watch and waits for it (the service closes).
func (w *stallWatch) halt() {
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.stop = nil
	w.mu.Unlock()
	if stop != nil {
		close(stop)
	}
	if done != nil {
		<-done
	}
}

// stallMark is a backend the watch reported degraded.
type stallMark struct {
	obs plane.StallObserver
	// quiet is when a look last began to find it with no stalled
	// connection and no reply (zero: the last look found one or the
	// other).
	quiet time.Time
}

// watchStalls looks at the service's connections until stop is closed;
// backends still degraded then are reported back, unless the service is
// closing.
func (s *TCPService) watchStalls(stop, done chan struct{}) {
	defer close(done)
	marks := map[*l4.Backend]*stallMark{}
	every := lookEvery(s.settings.Load().StallTimeout)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop.ch:
			return
		case <-stop:
			select {
			case <-s.stop.ch:
				return // closing: nothing is picked from it any more
			default:
			}
			for b, m := range marks {
				m.obs.BackendStall(b, plane.StallReport{Recovered: "stall_timeout turned off"})
			}
			return
		case <-t.C:
		}
		timeout := s.settings.Load().StallTimeout
		if timeout <= 0 {
			continue // set stops the watch at once
		}
		if e := lookEvery(timeout); e != every {
			every = e
			t.Reset(every)
		}
		s.lookStalls(timeout, marks, time.Now())
	}
}

// lookEvery is how often the watch looks for a stall_timeout.
func lookEvery(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return stallLookEvery
	}
	return min(stallLookEvery, timeout/2)
}

// stallTally is one backend's open connections, as one look found them.
type stallTally struct {
	obs     plane.StallObserver
	r       plane.StallReport
	replied int // connections that got a byte back within stall_timeout
	// lastBack is the latest byte back on any of its connections, lastAsk
	// the latest request of a stalled one (loop clock: one for all loops).
	lastBack, lastAsk int64
}

// lookStalls tallies the connections on every loop and reports the
// backends that are degraded, or no longer are.
func (s *TCPService) lookStalls(timeout time.Duration, marks map[*l4.Backend]*stallMark, now time.Time) {
	var mu sync.Mutex
	all := map[*l4.Backend]*stallTally{}
	s.ev.loops.each(func(l *loop) {
		mine := s.tallyStalls(l, int64(timeout))
		mu.Lock()
		defer mu.Unlock()
		for b, t := range mine {
			if a, ok := all[b]; ok {
				a.add(t)
			} else {
				all[b] = t
			}
		}
	})
	for b, t := range all {
		t.r.Degraded = t.r.Stalled > 0 && t.lastAsk > t.lastBack
		m := marks[b]
		switch {
		case t.r.Degraded:
			if m == nil {
				m = &stallMark{obs: t.obs}
				marks[b] = m
				s.Stats.StallDegraded.Add(1)
			}
			m.quiet = time.Time{}
			t.obs.BackendStall(b, t.r)
		case m != nil && (t.replied > 0 || t.r.Stalled > 0):
			// A stalled connection left and not degraded: a byte came
			// back after its request.
			delete(marks, b)
			t.r.Recovered = fmt.Sprintf("%d of %d connections got a reply", max(t.replied, 1), t.r.Conns)
			t.obs.BackendStall(b, t.r)
		}
	}
	for b, m := range marks {
		if t, ok := all[b]; ok && (t.r.Stalled > 0 || t.replied > 0) {
			continue
		}
		if m.quiet.IsZero() {
			m.quiet = now
			continue
		}
		if now.Sub(m.quiet) >= timeout {
			delete(marks, b)
			m.obs.BackendStall(b, plane.StallReport{Conns: all[b].conns(), Recovered: fmt.Sprintf("no stalled connection and no reply for %s: new connections may try it", timeout)})
		}
	}
}

// conns is the tally's open connections (nil: none).
func (t *stallTally) conns() int {
	if t == nil {
		return 0
	}
	return t.r.Conns
}

// add merges another loop's tally of the same backend.
func (t *stallTally) add(o *stallTally) {
	t.r.Conns += o.r.Conns
	t.r.Stalled += o.r.Stalled
	t.r.Unacked += o.r.Unacked
	t.r.ZeroWindow += o.r.ZeroWindow
	t.r.Waited = max(t.r.Waited, o.r.Waited)
	t.replied += o.replied
	t.lastBack = max(t.lastBack, o.lastBack)
	t.lastAsk = max(t.lastAsk, o.lastAsk)
}

// tallyStalls counts, on loop l, the service's open connections per
// backend: stalled, and replied within timeout (loop clock nanoseconds),
// with the latest byte back and the latest stalled request.
func (s *TCPService) tallyStalls(l *loop, timeout int64) map[*l4.Backend]*stallTally {
	out := map[*l4.Backend]*stallTally{}
	l.tick() // the loop's clock is read once a round; a posted task may run long after
	now := l.now()
	for c := range l.conns {
		if c.svc != s || c.state != evOpen || c.chosen == nil {
			continue
		}
		t := out[c.chosen]
		if t == nil {
			obs, _ := c.observer().(plane.StallObserver)
			if obs == nil {
				continue
			}
			t = &stallTally{obs: obs}
			out[c.chosen] = t
		}
		t.r.Conns++
		t.lastBack = max(t.lastBack, c.down.at)
		switch waited := c.stalled(now, timeout); {
		case waited > 0:
			t.r.Stalled++
			t.r.Waited = max(t.r.Waited, time.Duration(waited))
			t.lastAsk = max(t.lastAsk, c.up.at)
			t.evidence(c.backendSock.fd)
		case c.down.at > 0 && now-c.down.at < timeout:
			t.replied++
		}
	}
	return out
}

// stalled returns how long c has waited for a byte back when that is
// timeout or more (else 0): the client's bytes went to the backend after
// its last byte back, none came since, and none of the backend's bytes
// wait for the client (a client that does not read stalls nothing of the
// backend's).
func (c *evConn) stalled(now, timeout int64) int64 {
	c.mustLive()
	if c.up.at <= c.down.at || c.down.pending > 0 {
		return 0
	}
	if waited := now - c.up.at; waited >= timeout {
		return waited
	}
	return 0
}

// evidence adds what the kernel says of a stalled connection's backend
// socket: data unacknowledged (the host or the network does not answer),
// or a zero send window (the server reads nothing).
func (t *stallTally) evidence(fd int) {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	switch {
	case err != nil:
	case info.Unacked > 0:
		t.r.Unacked++
	case info.Snd_wnd == 0:
		t.r.ZeroWindow++
	}
}
