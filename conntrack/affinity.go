// Affinity: TCP source persistence, client IP -> backend per VIP, with its own timeout.

package conntrack

import (
	"context"
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// DefaultAffinityTimeout is how long a client stays pinned after its last
// use of the pin.
const DefaultAffinityTimeout = 10 * time.Minute

// AffinityOptions configure an Affinity. Zero fields take the Options
// defaults; Timeout defaults to DefaultAffinityTimeout.
type AffinityOptions struct {
	Timeout    time.Duration
	MaxEntries int
	Shards     int
	Tick       time.Duration
	SweepBatch int
	Now        func() time.Time
}

// Affinity pins a client address to a backend per VIP, so that a client's
// new connections reach the backend its earlier ones did. It owns no
// live-flow counts (the flows do); a pin only names a backend, and the
// caller checks the backend is still eligible before using it.
//
// It is a Table keyed by (VIP address, port, protocol; client IP with port
// zero), counting off, with one idle timeout for every protocol.
type Affinity struct {
	t *Table
}

// NewAffinity makes an Affinity; its sweeper runs once Start is called.
func NewAffinity(o AffinityOptions) (*Affinity, error) {
	timeout := orDefault(o.Timeout, DefaultAffinityTimeout)
	t, err := New(Options{
		TCPIdle:    timeout,
		UDPIdle:    timeout,
		MaxEntries: o.MaxEntries,
		Shards:     o.Shards,
		Tick:       o.Tick,
		SweepBatch: o.SweepBatch,
		Now:        o.Now,
		Uncounted:  true,
	})
	if err != nil {
		return nil, err
	}
	return &Affinity{t: t}, nil
}

// AffinityKey is the key of client's pin on vip: the VIP as destination,
// the client address as source with port zero.
func AffinityKey(vip l4.VIPKey, client netip.Addr) Key {
	f := l4.Flow{Src: netip.AddrPortFrom(client, 0), Dst: vip.Addr, Proto: vip.Proto}
	return KeyOf(&f)
}

// Get returns the backend client is pinned to on vip and refreshes the pin.
func (a *Affinity) Get(vip l4.VIPKey, client netip.Addr) (*l4.Backend, bool) {
	e, ok := a.t.Lookup(AffinityKey(vip, client))
	return e.Backend, ok
}

// Set pins client to b on vip, replacing any pin it had.
func (a *Affinity) Set(vip l4.VIPKey, client netip.Addr, b *l4.Backend) error {
	k := AffinityKey(vip, client)
	for {
		_, inserted, err := a.t.Insert(k, b, nil)
		if inserted || err != nil {
			return err
		}
		// Present: repoint it, unless it expired in between; then insert.
		if err := a.t.Rebind(k, b); err != ErrNotFound {
			return err
		}
	}
}

// Delete removes client's pin on vip (when its backend leaves, say).
func (a *Affinity) Delete(vip l4.VIPKey, client netip.Addr) bool {
	return a.t.Delete(AffinityKey(vip, client))
}

// Len returns the number of pins.
func (a *Affinity) Len() int { return a.t.Len() }

// Stats returns the pin table's counters.
func (a *Affinity) Stats() Stats { return a.t.Stats() }

// Sweep advances the clock and expires stale pins (see Table.Sweep).
func (a *Affinity) Sweep() (scanned, expired int) { return a.t.Sweep() }

// Start runs the sweeper until ctx is done or Close.
func (a *Affinity) Start(ctx context.Context) error { return a.t.Start(ctx) }

// Close stops the sweeper and drops every pin.
func (a *Affinity) Close() error { return a.t.Close() }
