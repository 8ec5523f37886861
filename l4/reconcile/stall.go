// Degraded backends: the proxy's stall watch (stall_timeout) reports a
// backend whose connections stopped answering; it leaves new picks until
// the watch reports it back, never as the VIP's last eligible backend.

package reconcile

import (
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// stallState is a backend's degraded mark.
type stallState struct {
	degraded bool
	reason   string    // what the last look found (plane.StallReport.Reason)
	since    time.Time // when it was marked
	// kept: degraded, but nothing else of the VIP could take a new flow,
	// so it still gets them (keepLast).
	kept bool
}

// BackendStall marks b degraded, or back, as the stall watch of the
// proxy reports it (plane.StallObserver). A report that does not change
// the mark only updates its words.
func (v *vip) BackendStall(b *l4.Backend, r plane.StallReport) {
	v.mu.Lock()
	rb, ok := v.backends[b.ID]
	if !ok || rb.b != b {
		v.mu.Unlock()
		return
	}
	was := rb.stall
	if r.Degraded {
		rb.stall.reason = r.Reason()
	}
	if r.Degraded == was.degraded {
		v.mu.Unlock()
		return
	}
	rb.stall = stallState{degraded: r.Degraded, reason: rb.stall.reason}
	if r.Degraded {
		rb.stall.since = time.Now()
	} else {
		rb.stall.reason = ""
	}
	rb.b.SetEligible(rb.keepsPinned())
	_ = v.rebuildLocked() // logged there
	kept := rb.stall.kept
	v.mu.Unlock()

	id := zap.String("backend", string(b.ID))
	if !r.Degraded {
		v.log.Info("backend no longer degraded", id, zap.String("reason", r.Reason()),
			zap.Duration("degraded_for", time.Since(was.since).Round(time.Millisecond)))
		return
	}
	v.log.Warn("backend degraded: its connections stall, no new flow goes to it", id, zap.String("reason", r.Reason()),
		zap.Int("stalled", r.Stalled), zap.Int("conns", r.Conns), zap.Duration("waited", r.Waited.Round(time.Millisecond)),
		zap.Int("unacked", r.Unacked), zap.Int("zero_window", r.ZeroWindow), zap.Bool("kept_as_last", kept))
}

// keepLast keeps the degraded backends in picks while nothing else of
// the VIP could take a new flow: a stall never takes the last eligible
// backend out (a server that answers slowly everywhere beats none). It
// reports whether that changed.
func keepLast(bs map[l4.BackendID]*backend, vc *config.VIP) bool {
	before := 0
	for _, b := range bs {
		if b.stall.kept {
			before++
			b.stall.kept = false
		}
	}
	after := 0
	if set, _ := servingSet(bs, vc, nil); len(set) == 0 {
		for _, b := range bs {
			if b.stall.degraded {
				b.stall.kept = true
				after++
			}
		}
	}
	return before != after
}

// keepLastLocked applies keepLast to the running backends (v.mu held).
func (v *vip) keepLastLocked() {
	if !keepLast(v.backends, v.cfg()) {
		return
	}
	for _, b := range v.backends {
		if b.stall.degraded {
			b.b.SetEligible(b.keepsPinned())
		}
	}
}

// stallStatus fills a degraded backend's status.
func (b *backend) stallStatus(bs *plane.BackendStatus) {
	if b.stall.degraded {
		bs.Degraded, bs.DegradedSince, bs.DegradedKept = b.stall.reason, b.stall.since, b.stall.kept
	}
}
