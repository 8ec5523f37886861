package balance

import (
	"sync/atomic"

	"github.com/l4lb/l4lb/l4"
)

// roundRobin is a placeholder (plain rotation, weights ignored) until the
// smooth weighted version lands.
type roundRobin struct {
	members []Member
	next    atomic.Uint64
}

func newRoundRobin(m []Member) *roundRobin {
	return &roundRobin{members: append([]Member(nil), m...)}
}

func (r *roundRobin) Pick(_ *l4.Flow, tried *Tried) *l4.Backend {
	n := len(r.members)
	for i := 0; i < n; i++ {
		b := r.members[r.next.Add(1)%uint64(n)].Backend
		if !tried.Has(b) {
			b.Acquire()
			return b
		}
	}
	return nil
}
