// Backend indexes: small numbers a BPF map can hold in place of a pointer.
package reconcile

import (
	"fmt"
	"sync"
)

// indexPool hands out backend indexes 1..max, unique among the backends
// of all running VIPs. A freed index goes to the back of a queue, so it is
// reused as late as possible: a packet in flight or a conntrack entry not
// yet purged that still names it then reaches nothing rather than another
// backend (Katran recycles its real ids the same way).
type indexPool struct {
	mu   sync.Mutex
	max  uint32
	next uint32   // the lowest index never handed out
	free []uint32 // freed indexes, oldest first
}

func newIndexPool(max uint32) *indexPool { return &indexPool{max: max, next: 1} }

// get returns an unused index.
func (p *indexPool) get() (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next <= p.max {
		p.next++
		return p.next - 1, nil
	}
	if len(p.free) == 0 {
		return 0, fmt.Errorf("more than %d backends in all VIPs", p.max)
	}
	i := p.free[0]
	p.free = p.free[1:]
	return i, nil
}

// put returns index i (0 is ignored).
func (p *indexPool) put(i uint32) {
	if i == 0 {
		return
	}
	p.mu.Lock()
	p.free = append(p.free, i)
	p.mu.Unlock()
}
