package l4

import (
	"net/netip"
	"sync/atomic"
	"time"
)

// FlowCounter counts live flows. Dec never goes below zero: an unmatched
// decrement is a bug elsewhere, so it is counted (Underflows) for the
// caller to report instead of being hidden in a negative count.
type FlowCounter struct {
	n          atomic.Int64
	underflows atomic.Uint64
}

// Inc counts one more live flow.
func (c *FlowCounter) Inc() { c.n.Add(1) }

// Dec counts one flow ended. It returns false, and leaves the count
// unchanged, when there was no live flow to end. One atomic add in the
// common case: the count may read -1 for an instant during an unmatched
// Dec, which Load hides.
func (c *FlowCounter) Dec() bool {
	if c.n.Add(-1) >= 0 {
		return true
	}
	c.n.Add(1)
	c.underflows.Add(1)
	return false
}

// Load returns the live flow count.
func (c *FlowCounter) Load() int64 { return max(c.n.Load(), 0) }

// Underflows returns how many decrements found the count at zero.
func (c *FlowCounter) Underflows() uint64 { return c.underflows.Load() }

// Backend is one backend of one VIP. Its identity and address are fixed at
// creation; everything else is live state in atomics, read on hot paths and
// shared by every snapshot that lists the backend.
type Backend struct {
	ID   BackendID
	Addr netip.AddrPort
	// Index is a small number unique among the running backends of all
	// VIPs (0 = none), fixed at creation: what a BPF map can hold where Go
	// holds a pointer. The runtime assigns it.
	Index uint32
	// addrText is Addr.String(), kept because dialing takes a string.
	addrText string

	// vipFlows is the VIP-wide total that Acquire and Release keep in step
	// with flows, so that bounded-load hashing reads the mean in O(1).
	vipFlows *FlowCounter

	flows FlowCounter
	// limited: a cap or a rate is set, so picks take the checked path
	// (one load for a backend with neither).
	limited    atomic.Bool
	maxFlows   atomic.Int64 // cap on live flows (max_conns, max_sessions); 0 = none
	rate       connRate     // max_conn_rate
	peak       atomic.Int64 // the most live flows seen at once (NotePeak)
	rtt        EWMA
	ineligible atomic.Bool // down, drained (weight 0) or removed from the config

	// Stats are cumulative counters the data planes keep per backend.
	Stats BackendStats
}

// BackendStats are cumulative per-backend counters (never reset on reload).
type BackendStats struct {
	Flows        atomic.Uint64 // flows established (connections, UDP sessions)
	ConnectFails atomic.Uint64 // connects that were refused or timed out
	BytesIn      atomic.Uint64 // client to backend
	BytesOut     atomic.Uint64 // backend to client
	// Unanswered counts UDP sessions that ended by session_timeout
	// without a reply to any of their datagrams: a silent backend.
	Unanswered atomic.Uint64
}

// NewBackend makes a backend whose flows also count toward vipFlows (which
// may be nil).
func NewBackend(id BackendID, addr netip.AddrPort, vipFlows *FlowCounter) *Backend {
	b := &Backend{ID: id, Addr: addr, addrText: addr.String(), vipFlows: vipFlows}
	b.rate.epoch = time.Now()
	b.rtt.SetAlpha(DefaultEWMAAlpha)
	return b
}

// AddrString returns Addr in host:port form without allocating.
func (b *Backend) AddrString() string { return b.addrText }

// Acquire counts a new live flow on the backend. Balancers call it when they
// pick; whoever holds the flow calls Release exactly once when it ends.
func (b *Backend) Acquire() {
	b.NotePeak(b.flows.n.Add(1))
	if b.vipFlows != nil {
		b.vipFlows.Inc()
	}
}

// TryAcquire counts a new live flow on the backend unless it is at its cap
// (SetMaxFlows) or over its rate (SetMaxConnRate), and reports whether it
// did. Unlimited it is Acquire; capped it is a compare-and-swap loop, so
// that racing picks never push the count past the cap; a rate takes its
// token after the slot, and gives the slot back when none is due. It does
// not allocate.
func (b *Backend) TryAcquire() bool {
	if !b.limited.Load() {
		b.Acquire()
		return true
	}
	n, ok := b.takeSlot()
	if !ok {
		return false
	}
	if !b.rate.take() {
		b.flows.Dec()
		return false
	}
	b.NotePeak(n)
	if b.vipFlows != nil {
		b.vipFlows.Inc()
	}
	return true
}

// takeSlot counts a flow on b alone (not the VIP's total) below its cap,
// and returns the count it raised.
func (b *Backend) takeSlot() (int64, bool) {
	limit := b.maxFlows.Load()
	if limit <= 0 {
		return b.flows.n.Add(1), true
	}
	for {
		n := b.flows.n.Load()
		if n >= limit {
			return 0, false
		}
		if b.flows.n.CompareAndSwap(n, n+1) {
			return n + 1, true
		}
	}
}

// Full reports whether the backend can take no new flow now: at its cap on
// live flows, or over its max_conn_rate. Pickers skip it as they skip a
// backend the flow already tried. Unlimited, one atomic load.
func (b *Backend) Full() bool {
	if !b.limited.Load() {
		return false
	}
	limit := b.maxFlows.Load()
	return limit > 0 && b.flows.n.Load() >= limit || b.rate.over()
}

// Limited reports whether the backend has a cap or a rate: pickers take
// their unchecked fast path when it has neither.
func (b *Backend) Limited() bool { return b.limited.Load() }

// SetMaxFlows sets the cap on live flows (0 = none). The runtime sets it
// on every apply: a reload changes it for new flows without rebuilding
// the backend; flows above a lowered cap stay until they end.
func (b *Backend) SetMaxFlows(n int64) {
	b.maxFlows.Store(max(n, 0))
	b.setLimited()
}

// MaxFlows returns the cap on live flows (0 = none).
func (b *Backend) MaxFlows() int64 { return b.maxFlows.Load() }

// SetMaxConnRate sets the cap on new flows a second (0 = none), with a
// burst of a tenth of a second's worth (RateBurstDivisor). The runtime
// sets it on every apply, like SetMaxFlows.
func (b *Backend) SetMaxConnRate(perSec int64) {
	b.rate.set(perSec)
	b.setLimited()
}

// MaxConnRate returns the cap on new flows a second (0 = none).
func (b *Backend) MaxConnRate() int64 { return b.rate.perSec.Load() }

// OverRate reports whether the backend is over its max_conn_rate now.
func (b *Backend) OverRate() bool { return b.limited.Load() && b.rate.over() }

// RateWait returns how long until the backend may take a new flow by its
// rate (0: now, or it has none); its cap is not considered.
func (b *Backend) RateWait() time.Duration { return b.rate.wait() }

// setLimited is called by the one writer after changing a limit.
func (b *Backend) setLimited() {
	b.limited.Store(b.maxFlows.Load() > 0 || b.rate.interval.Load() > 0)
}

// NotePeak raises the backend's high-water mark of live flows to n. The
// proxy's picks call it with the count they just raised (one load and
// one compare per new flow; a store only on a new high), the XDP plane
// with each conntrack count it reads.
func (b *Backend) NotePeak(n int64) {
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// PeakFlows returns the most live flows the backend held at once since
// it was created (a reload that keeps it keeps its peak).
func (b *Backend) PeakFlows() int64 { return b.peak.Load() }

// Release counts a live flow ended. It returns false on an unmatched
// release (a bug to log; the count stays at zero).
func (b *Backend) Release() bool {
	if !b.flows.Dec() {
		return false
	}
	if b.vipFlows != nil {
		b.vipFlows.Dec()
	}
	return true
}

// Eligible reports whether new flows may go to the backend. Flows pinned to
// it (UDP sessions, affinity entries) check it on their next packet or
// connection and move when it is false.
func (b *Backend) Eligible() bool { return !b.ineligible.Load() }

// SetEligible is called by the runtime whenever the backend's health,
// weight or membership changes.
func (b *Backend) SetEligible(ok bool) { b.ineligible.Store(!ok) }

// LiveFlows returns the backend's live flow count.
func (b *Backend) LiveFlows() int64 { return b.flows.Load() }

// Underflows returns how many releases had no matching acquire.
func (b *Backend) Underflows() uint64 { return b.flows.Underflows() }

// VIPFlows returns the VIP-wide counter this backend reports into (may be nil).
func (b *Backend) VIPFlows() *FlowCounter { return b.vipFlows }

// RTT is the backend's handshake round-trip estimate, fed by health probes
// and by the proxy's own connects.
func (b *Backend) RTT() *EWMA { return &b.rtt }

// ObserveRTT folds one handshake time into the backend's estimate.
func (b *Backend) ObserveRTT(d time.Duration) { b.rtt.Observe(d) }
