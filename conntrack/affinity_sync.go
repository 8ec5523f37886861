// Affinity pins shared between balancers: reading them with their age
// and installing a peer's with its age (flow sync).

package conntrack

import (
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// fromPeer is the owner hung on a pin installed from a peer: such pins
// are not sent back out, and the table cap counts them.
type fromPeer struct{}

// RangePins calls fn, until it returns false, with every pin: its VIP,
// client address, backend, idle time and whether a peer installed it.
// Like Table.Range it refreshes nothing and copies a shard at a time.
func (a *Affinity) RangePins(fn func(vip l4.VIPKey, client netip.Addr, b *l4.Backend, idle time.Duration, peer bool) bool) {
	a.t.Range(func(k Key, p Peeked) bool {
		f := k.Flow()
		_, peer := p.Owner.(fromPeer)
		return fn(l4.VIPKey{Addr: f.Dst, Proto: f.Proto}, f.Src.Addr(), p.Backend, p.Idle, peer)
	})
}

// InstallPin pins client to b on vip as a peer's pin that has been idle
// for idle, unless client has a pin there already (false, nil). A pin
// idle for the timeout or longer is not installed (false, nil): it would
// have expired here. It expires as a local pin idle as long would.
func (a *Affinity) InstallPin(vip l4.VIPKey, client netip.Addr, b *l4.Backend, idle time.Duration) (bool, error) {
	return a.t.insertIdle(AffinityKey(vip, client), b, fromPeer{}, idle)
}

// insertIdle is Insert of an entry whose last use was idle ago (to the
// tick); it inserts nothing when idle reaches k's idle timeout.
func (t *Table) insertIdle(k Key, b *l4.Backend, owner any, idle time.Duration) (bool, error) {
	if b == nil {
		return false, ErrNilBackend
	}
	back := uint32(max(idle, 0) / t.tick)
	if back >= t.idle(k.proto) {
		t.release(b)
		return false, nil
	}
	s, tag := t.locate(&k)
	var buf [1]ended
	s.mu.Lock()
	out, inserted, ev, err := t.insertLocked(s, &k, tag, b, owner, buf[:0])
	if inserted {
		if _, slot, ok := s.find(&k, tag); ok {
			e := s.at(slot)
			e.last.Store(e.last.Load() - back)
		}
	}
	s.mu.Unlock()
	if !inserted {
		t.release(b)
		return false, err
	}
	t.finish(ev, ReasonEvicted)
	if t.onStart != nil {
		t.onStart(k, out)
	}
	return true, nil
}
