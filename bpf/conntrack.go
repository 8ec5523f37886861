// Reading and purging the conntrack LRU from user space.

package bpf

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/l4lb/l4lb/l4"
	"golang.org/x/sys/unix"
)

// FlowEntry is a conntrack entry.
type FlowEntry struct {
	// Backend is the backend index the flow is pinned to.
	Backend uint32
	// Closing says a FIN was seen.
	Closing bool
	// LastSeen is when the program last refreshed the entry, on the
	// CLOCK_MONOTONIC scale of MonotonicNow. It comes from the coarse
	// clock (a tick behind at most) and is refreshed at most once every
	// 64 jiffies (64 to 640 ms by the kernel's HZ), so it lags the last
	// packet by up to that.
	LastSeen time.Duration
	// Synced says flow sync wrote the entry from a peer balancer's.
	Synced bool
}

func flowEntryOf(s *lbFlowState) FlowEntry {
	return FlowEntry{
		Backend:  s.Backend,
		Closing:  s.Flags&uint32(lbFlowFlagFLOW_FIN) != 0,
		LastSeen: time.Duration(s.LastSeen),
		Synced:   s.Flags&uint32(lbFlowFlagFLOW_SYNCED) != 0,
	}
}

// MonotonicNow reads CLOCK_MONOTONIC, the clock of FlowEntry.LastSeen
// (the program reads its coarse variant, bpf_ktime_get_coarse_ns).
func MonotonicNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	return time.Duration(ts.Nano())
}

// LookupFlow returns the conntrack entry of f (Src = client, Dst = VIP);
// ErrNotFound if there is none. Reading does not make the entry recent.
func (lb *LB) LookupFlow(f l4.Flow) (FlowEntry, error) {
	k := flowKeyOf(f)
	var s lbFlowState
	if err := lb.objs.Conntrack.Lookup(&k, &s); err != nil {
		return FlowEntry{}, fmt.Errorf("lookup flow %v: %w", f, notFound(err))
	}
	return flowEntryOf(&s), nil
}

// ctBatchSize is how many entries one batch syscall returns.
const ctBatchSize = 512

// ctBatch holds the buffers of one conntrack walk, reused across walks so
// a walk allocates a constant amount whatever the table holds.
type ctBatch struct {
	keys []lbFlowKey
	vals []lbFlowState
	// The slices boxed once: converting a slice to an interface at each
	// BatchLookup call would allocate.
	keysOut, valsOut any
}

// walk calls fn for every conntrack entry, in batches. The table changes
// under the walk: entries may be missed or seen twice (hash map batch
// semantics). fn returning false stops the walk. The caller holds ctMu.
func (lb *LB) walk(fn func(k *lbFlowKey, s *lbFlowState) bool) error {
	b := &lb.ctBatch
	if b.keys == nil {
		b.keys, b.vals = make([]lbFlowKey, ctBatchSize), make([]lbFlowState, ctBatchSize)
		b.keysOut, b.valsOut = b.keys, b.vals
	}
	var cursor ebpf.MapBatchCursor
	for {
		n, err := lb.objs.Conntrack.BatchLookup(&cursor, b.keysOut, b.valsOut, nil)
		for i := range n {
			if !fn(&b.keys[i], &b.vals[i]) {
				return nil
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("conntrack batch lookup: %w", err)
		}
	}
}

// Flows calls fn for every conntrack entry until fn returns false.
func (lb *LB) Flows(fn func(l4.Flow, FlowEntry) bool) error {
	lb.ctMu.Lock()
	defer lb.ctMu.Unlock()
	return lb.walk(func(k *lbFlowKey, s *lbFlowState) bool { return fn(k.flow(), flowEntryOf(s)) })
}

// FlowCounts counts live flows per backend index into counts (which it
// zeroes first; indices beyond its length are not counted) and returns
// the total. A flow is live when it is not closing and was seen within
// idle before now (MonotonicNow). Keep idle well above a second: entries
// are refreshed at most once every 64 jiffies (up to 640 ms).
func (lb *LB) FlowCounts(now, idle time.Duration, counts []uint64) (int, error) {
	clear(counts)
	cutoff := uint64(max(now-idle, 0))
	total := 0
	lb.ctMu.Lock()
	defer lb.ctMu.Unlock()
	err := lb.walk(func(_ *lbFlowKey, s *lbFlowState) bool {
		if s.Flags&uint32(lbFlowFlagFLOW_FIN) != 0 || s.LastSeen < cutoff {
			return true
		}
		total++
		if int(s.Backend) < len(counts) {
			counts[s.Backend]++
		}
		return true
	})
	return total, err
}

// PurgeBackend deletes every conntrack entry pinned to backend index i
// and returns how many it deleted: its flows rehash on their next packet.
// Use it when a backend goes down or is removed, before its index is
// reused.
func (lb *LB) PurgeBackend(i uint32) (int, error) {
	n, err := lb.purge(func(_ *lbFlowKey, s *lbFlowState) bool { return s.Backend == i })
	if err != nil {
		return n, fmt.Errorf("purge backend %d: %w", i, err)
	}
	return n, nil
}

// PurgeVIP deletes every conntrack entry of a VIP and returns how many.
func (lb *LB) PurgeVIP(key l4.VIPKey) (int, error) {
	v, err := vipKeyOf(key)
	if err != nil {
		return 0, fmt.Errorf("purge vip: %w", err)
	}
	n, err := lb.purge(func(k *lbFlowKey, _ *lbFlowState) bool { return k.matchesVIP(&v) })
	if err != nil {
		return n, fmt.Errorf("purge vip %v: %w", key, err)
	}
	return n, nil
}

// purge collects the keys that match, then deletes them: deleting while
// the batch cursor walks the buckets could skip entries.
func (lb *LB) purge(match func(*lbFlowKey, *lbFlowState) bool) (int, error) {
	lb.ctMu.Lock()
	defer lb.ctMu.Unlock()
	var doomed []lbFlowKey
	err := lb.walk(func(k *lbFlowKey, s *lbFlowState) bool {
		if match(k, s) {
			doomed = append(doomed, *k)
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	deleted := 0
	for i := range doomed {
		err := lb.objs.Conntrack.Delete(&doomed[i])
		switch {
		case err == nil:
			deleted++
		case !errors.Is(err, ebpf.ErrKeyNotExist): // gone already: evicted or RST
			return deleted, err
		}
	}
	return deleted, nil
}
