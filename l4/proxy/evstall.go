// A safety net for a lost EPOLLOUT edge: a connection waiting with bytes
// for a destination that never signals it can take them again.
//
// Observed on kernel 6.18 over veth (TestSlowPeerBoundedMemory, about one
// run in three with a 10 s stall): after a peer stops reading for
// seconds, then reads again, a direction can sit with bytes in its pipe
// while the destination socket's send queue is empty and no EPOLLOUT
// ever comes (no event was dropped by the loop: the kernel sent none).
// Until the cause is found, a loop that has a direction blocked on its
// destination looks once a second at every such direction, and one that
// moved nothing for a whole second tries its write again: a real full
// socket answers EAGAIN (one syscall a second for a stalled peer), a
// lost edge is repaired within two seconds.
package proxy

import "time"

// stallCheckEvery is how often a loop looks at blocked directions.
const stallCheckEvery = time.Second

// stallCheck is the loop's timer for blocked directions.
type stallCheck struct{}

func (stallCheck) pending(uint32) bool { return true }

func (stallCheck) onTimer(l *loop, _ uint32) {
	l.stallArmed = false
	blocked := false
	for c := range l.conns {
		if c.state != evOpen {
			continue
		}
		kick := false
		for _, d := range [2]*evDir{&c.up, &c.down} {
			if d.pending == 0 || d.dst.writable {
				continue
			}
			if d.n == d.stallMark {
				d.dst.writable = true // try again: EAGAIN if it is really full
				kick = true
			}
			d.stallMark = d.n
			blocked = true
		}
		if kick {
			before := c.up.n + c.down.n
			c.pump(l)
			if c.up.n+c.down.n != before {
				c.svc.Stats.LostWakeups.Add(1)
				c.svc.rateLog("a connection's destination never signalled it could take bytes again; moved them on a retry (lost wake-up)")
			}
		}
	}
	if blocked {
		l.watchStalls()
	}
}

// watchStalls arms the loop's check of blocked directions, once.
func (l *loop) watchStalls() {
	if !l.stallArmed {
		l.stallArmed = true
		l.after(stallCheckEvery, stallCheck{}, 0)
	}
}
