// Indexes: small numbers a BPF map can hold in place of a pointer.

package xdpplane

import (
	"fmt"
	"sync"
)

// IndexPool hands out indexes 1..max, unique among the backends of all
// running VIPs (or among xdp VIPs). A freed index goes to the back of a
// queue, so it is reused as late as possible: a packet in flight or a
// conntrack entry not yet purged that still names it then reaches nothing
// rather than another backend (Katran recycles its real ids the same way).
//
// Indexes found in maps adopted from an earlier l4lb are reserved for the
// same thing they named there (a backend address, a VIP key), so that the
// adopted conntrack's flows keep their backends across a restart.
type IndexPool struct {
	mu       sync.Mutex
	max      uint32
	next     uint32           // the lowest index never handed out
	free     []uint32         // freed indexes, oldest first
	reserved map[any][]uint32 // owner -> indexes held for it, not yet claimed
	held     map[uint32]bool  // every index ever reserved: the counter skips them
}

func NewIndexPool(max uint32) *IndexPool {
	return &IndexPool{max: max, next: 1, reserved: map[any][]uint32{}, held: map[uint32]bool{}}
}

// Get returns an unused index.
func (p *IndexPool) Get() (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.next <= p.max {
		p.next++
		if i := p.next - 1; !p.held[i] {
			return i, nil
		}
	}
	if len(p.free) == 0 {
		return 0, fmt.Errorf("more than %d in use", p.max)
	}
	i := p.free[0]
	p.free = p.free[1:]
	return i, nil
}

// GetFor returns an index reserved for owner, else an unused one.
func (p *IndexPool) GetFor(owner any) (uint32, error) {
	p.mu.Lock()
	if held := p.reserved[owner]; len(held) > 0 {
		i := held[0]
		if p.reserved[owner] = held[1:]; len(held) == 1 {
			delete(p.reserved, owner)
		}
		p.mu.Unlock()
		return i, nil
	}
	p.mu.Unlock()
	return p.Get()
}

// Reserve holds index i for owner until GetFor claims it or Unreserve
// gives it up.
func (p *IndexPool) Reserve(i uint32, owner any) {
	if i == 0 || i > p.max {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reserved[owner] = append(p.reserved[owner], i)
	p.held[i] = true
}

// Unreserve frees every index still reserved and returns them with their
// owners.
func (p *IndexPool) Unreserve() map[uint32]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[uint32]any{}
	for owner, idxs := range p.reserved {
		for _, i := range idxs {
			out[i] = owner
			p.free = append(p.free, i)
		}
	}
	p.reserved = map[any][]uint32{}
	return out
}

// Put returns index i (0 is ignored).
func (p *IndexPool) Put(i uint32) {
	if i == 0 {
		return
	}
	p.mu.Lock()
	p.free = append(p.free, i)
	p.mu.Unlock()
}
