// The process-wide connection budget derived from the open-file limit.
package proxy

import "sync"

// ConnBudget caps proxied TCP connections across all VIPs so that every
// accepted client can also open its backend socket (and borrow pipes): at
// the cap the accept loops wait and new clients queue in the listen
// backlog, instead of being accepted and then reset for lack of a
// descriptor. HAProxy derives its maxconn from the file limit the same way.
type ConnBudget struct {
	slots chan struct{}
}

// NewConnBudget allows n connections at once (at least 1).
func NewConnBudget(n int) *ConnBudget {
	return &ConnBudget{slots: make(chan struct{}, max(n, 1))}
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
func (b *ConnBudget) Cap() int { return cap(b.slots) }

// acquire takes a slot, waiting while none is free (after calling full);
// it returns false when stop closes first.
func (b *ConnBudget) acquire(stop <-chan struct{}, full func()) bool {
	select {
	case b.slots <- struct{}{}:
		return true
	default:
	}
	if full != nil {
		full()
	}
	select {
	case b.slots <- struct{}{}:
		return true
	case <-stop:
		return false
	}
}

func (b *ConnBudget) release() { <-b.slots }

// tryAcquire takes a slot if one is free, without waiting.
func (b *ConnBudget) tryAcquire() bool {
	select {
	case b.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// room reports whether a slot is free.
func (b *ConnBudget) room() bool { return len(b.slots) < cap(b.slots) }

// closer closes a channel once.
type closer struct {
	once sync.Once
	ch   chan struct{}
}

func (c *closer) close() { c.once.Do(func() { close(c.ch) }) }
