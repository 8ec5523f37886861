// The process-wide connection budget derived from the open-file limit.

package proxy

import (
	"sync"
	"sync/atomic"
)

// ConnBudget caps proxied TCP connections across all VIPs so that every
// accepted client can also open its backend socket (and borrow pipes): at
// the cap the VIPs stop accepting and new clients queue in the listen
// backlog, instead of being accepted and then reset for lack of a
// descriptor. HAProxy derives its maxconn from the file limit the same way.
type ConnBudget struct {
	cap  int64
	used atomic.Int64

	// VIPs that stopped accepting for want of a slot: any connection's
	// end, on any VIP, resumes them.
	anyWaiting atomic.Bool
	mu         sync.Mutex
	waiting    map[*TCPService]struct{}
}

// NewConnBudget allows n connections at once (at least 1).
func NewConnBudget(n int) *ConnBudget {
	return &ConnBudget{cap: int64(max(n, 1)), waiting: map[*TCPService]struct{}{}}
}

// BudgetForFiles is the budget an open-file limit allows: three
// descriptors per connection (two sockets, and room for a pipe while it
// moves bytes) after a reserve for listeners, probes and the pipe pool.
func BudgetForFiles(nofile uint64) int {
	const reserve = 64
	if nofile <= reserve+3 {
		return 1
	}
	return int((nofile - reserve) / 3)
}

// Cap returns the number of connections allowed at once.
func (b *ConnBudget) Cap() int { return int(b.cap) }

// tryAcquire takes a slot if one is free.
func (b *ConnBudget) tryAcquire() bool {
	for {
		u := b.used.Load()
		if u >= b.cap {
			return false
		}
		if b.used.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

// room reports whether a slot is free.
func (b *ConnBudget) room() bool { return b.used.Load() < b.cap }

// release gives a slot back and resumes the VIPs waiting for one.
func (b *ConnBudget) release() {
	b.used.Add(-1)
	if !b.anyWaiting.Load() {
		return
	}
	b.mu.Lock()
	var resume []*TCPService
	for s := range b.waiting {
		resume = append(resume, s)
	}
	clear(b.waiting)
	b.anyWaiting.Store(false)
	b.mu.Unlock()
	for _, s := range resume {
		s.tryResume()
	}
}

// wait records that s stopped accepting for want of a slot. A slot freed
// meanwhile resumes it at once.
func (b *ConnBudget) wait(s *TCPService) {
	b.mu.Lock()
	b.waiting[s] = struct{}{}
	b.anyWaiting.Store(true)
	b.mu.Unlock()
	if b.room() {
		s.tryResume()
	}
}

// forget drops a closed VIP from the waiters.
func (b *ConnBudget) forget(s *TCPService) {
	b.mu.Lock()
	delete(b.waiting, s)
	b.mu.Unlock()
}

// closer closes a channel once.
type closer struct {
	once sync.Once
	ch   chan struct{}
}

func (c *closer) close() { c.once.Do(func() { close(c.ch) }) }
