// max_conns: the accept loop stops accepting while a VIP is at its limit.
package proxy

import "sync"

// limiter counts a VIP's connections against max_conns. At the limit the
// accept loop waits, so new clients queue in the kernel's listen backlog
// (as with HAProxy's maxconn) instead of being refused; they are accepted
// as connections end.
type limiter struct {
	mu      sync.Mutex
	max     int // 0 = unlimited
	n       int
	stopped bool
	wake    chan struct{}
}

func (l *limiter) init() { l.wake = make(chan struct{}, 1) }

// acquire takes a slot, waiting while the VIP is full (after calling
// full, once). It returns false once stop was called.
func (l *limiter) acquire(full func()) bool {
	for waited := false; ; waited = true {
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return false
		}
		if l.max == 0 || l.n < l.max {
			l.n++
			l.mu.Unlock()
			return true
		}
		l.mu.Unlock()
		if !waited && full != nil {
			full()
		}
		<-l.wake
	}
}

// tryAcquire takes a slot if one is free, without waiting.
func (l *limiter) tryAcquire() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.max != 0 && l.n >= l.max {
		return false
	}
	l.n++
	return true
}

// room reports whether a slot is free.
func (l *limiter) room() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.stopped && (l.max == 0 || l.n < l.max)
}

func (l *limiter) release() {
	l.mu.Lock()
	l.n--
	l.mu.Unlock()
	l.signal()
}

func (l *limiter) setMax(n int) {
	l.mu.Lock()
	l.max = max(n, 0)
	l.mu.Unlock()
	l.signal()
}

func (l *limiter) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.signal()
}

func (l *limiter) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}
