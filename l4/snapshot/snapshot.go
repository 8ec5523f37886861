package snapshot

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
)

// Snapshot is what a new flow of one VIP picks from.
type Snapshot struct {
	// Members are the eligible backends, sorted by ID.
	Members []balance.Member
	Options balance.Options
	picker  balance.Picker
	gen     uint64 // set by the Store that first publishes it
}

// Build makes a snapshot over members (copied and sorted by backend ID, so
// that hash tables depend on identities, never on config order).
func Build(opts balance.Options, members []balance.Member) (*Snapshot, error) {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b balance.Member) int { return cmp.Compare(a.Backend.ID, b.Backend.ID) })
	for i := 1; i < len(ms); i++ {
		if ms[i].Backend.ID == ms[i-1].Backend.ID {
			return nil, fmt.Errorf("backend %q listed twice", ms[i].Backend.ID)
		}
	}
	p, err := balance.New(opts, ms)
	if err != nil {
		return nil, err
	}
	return &Snapshot{Members: ms, Options: opts, picker: p}, nil
}

// Pick chooses a backend for f, skipping tried, and counts a live flow on it
// (see balance.Picker). It returns nil when no eligible backend is left.
func (s *Snapshot) Pick(f *l4.Flow, tried *balance.Tried) *l4.Backend {
	if s == nil || s.picker == nil {
		return nil
	}
	return s.picker.Pick(f, tried)
}

// MaglevTable returns the Maglev lookup table that Pick uses (entry s is
// an index into Members), or nil when the algorithm is not maglev. The XDP
// data plane writes this very table into its map, so a flow lands on the
// same backend in proxy and xdp mode. Callers must not change it.
func (s *Snapshot) MaglevTable() []uint32 {
	if s == nil {
		return nil
	}
	if t, ok := s.picker.(interface{ Table() []uint32 }); ok {
		return t.Table()
	}
	return nil
}

// Explain says what Pick would do for f now, and why, without doing it
// (see balance.Explainer): no flow is acquired, no rotation advances.
// Indexes in the answer are into Members.
func (s *Snapshot) Explain(f *l4.Flow) balance.Explanation {
	var e balance.Explanation
	if x, ok := s.pickerOrNil().(balance.Explainer); ok {
		e = x.Explain(f)
	} else {
		e = balance.Explanation{Chosen: -1, Next: -1}
	}
	if s != nil {
		e.Algorithm = s.Options.Algorithm
	}
	return e
}

func (s *Snapshot) pickerOrNil() balance.Picker {
	if s == nil {
		return nil
	}
	return s.picker
}

// Generation numbers the snapshots one Store published: 1 for the first,
// then one more for each (every health change, weight change, override
// or reload of a VIP makes one). 0: never published.
func (s *Snapshot) Generation() uint64 {
	if s == nil {
		return 0
	}
	return s.gen
}

// Len returns the number of eligible backends.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	return len(s.Members)
}

// Store publishes snapshots to readers. The zero value holds nil (no backend).
type Store struct {
	p   atomic.Pointer[Snapshot]
	gen uint64 // snapshots published; written by the one writer only
}

// Load returns the current snapshot (nil before the first Store).
func (s *Store) Load() *Snapshot { return s.p.Load() }

// Store publishes snap and numbers it (Generation), unless a Store
// published it before. Stores are made by one writer at a time.
func (s *Store) Store(snap *Snapshot) {
	if snap != nil && snap.gen == 0 {
		s.gen++
		snap.gen = s.gen // before the atomic store: readers never see it change
	}
	s.p.Store(snap)
}

// Full reports whether some member the flow has not tried is at its cap:
// a Pick that returned nil then means "wait for a slot" rather than "no
// backend". Called only after a nil Pick, so its scan costs nothing on the
// common path.
func (s *Snapshot) Full(tried *balance.Tried) bool {
	if s == nil {
		return false
	}
	for _, m := range s.Members {
		if m.Backend.Full() && !tried.Has(m.Backend) {
			return true
		}
	}
	return false
}

// Room reports whether some member is below its cap: connections waiting
// for a slot may be served.
func (s *Snapshot) Room() bool {
	if s == nil {
		return false
	}
	for _, m := range s.Members {
		if !m.Backend.Full() {
			return true
		}
	}
	return false
}

// RateWait returns how long until a member that is over its max_conn_rate
// (and below its cap) may take a flow again: when waiting connections
// should look again. 0 when no member waits on its rate. Called only with
// connections waiting.
func (s *Snapshot) RateWait() time.Duration {
	if s == nil {
		return 0
	}
	var soonest time.Duration
	for _, m := range s.Members {
		b := m.Backend
		if d := b.RateWait(); d > 0 && (b.MaxFlows() == 0 || b.LiveFlows() < b.MaxFlows()) && (soonest == 0 || d < soonest) {
			soonest = d
		}
	}
	return soonest
}
