// max_conns: a VIP stops accepting while it is at its limit.

package proxy

import "sync/atomic"

// limiter counts a VIP's connections against max_conns. At the limit the
// VIP stops accepting, so new clients queue in the kernel's listen
// backlog (as with HAProxy's maxconn) instead of being refused; they are
// accepted as connections end. Lock-free: every loop takes and gives
// slots.
type limiter struct {
	max     atomic.Int64 // 0 = unlimited
	n       atomic.Int64
	stopped atomic.Bool
}

// tryAcquire takes a slot if one is free.
func (l *limiter) tryAcquire() bool {
	for {
		if l.stopped.Load() {
			return false
		}
		n, m := l.n.Load(), l.max.Load()
		if m != 0 && n >= m {
			return false
		}
		if l.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// room reports whether a slot is free.
func (l *limiter) room() bool {
	m := l.max.Load()
	return !l.stopped.Load() && (m == 0 || l.n.Load() < m)
}

func (l *limiter) release()     { l.n.Add(-1) }
func (l *limiter) setMax(n int) { l.max.Store(int64(max(n, 0))) }
func (l *limiter) stop()        { l.stopped.Store(true) }
