// A reload that changes a VIP's mode (proxy <-> xdp): the old plane keeps
// the flows established before it until they end or drain_timeout, while
// the new plane takes every new flow on the same address.

package reconcile

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// modeChange is a VIP's mode change whose old plane still drains.
type modeChange struct {
	old, next    *vip
	from, to     l4.Mode
	since, until time.Time
	cancel       context.CancelFunc // ends the drain now: the rest are cut
	done         chan struct{}      // closed once the old plane is gone
}

// inheritsFlows reports whether the plane that replaces old (a mode
// change) must leave old's connections to the kernel: a proxy TCP VIP's
// sockets go on while the XDP program sees their packets first. A proxy
// UDP VIP's sessions do not: their next datagrams are balanced by XDP.
func inheritsFlows(old *vip) bool {
	return old != nil && old.cfg().Mode == l4.ModeProxy && old.key.Proto == l4.TCP
}

// changeMode hands key's address from old, the running VIP, to next, its
// new plane (opened by prepare, told to inherit by newVIP). Old takes no
// new flow from now on and drains in the background for drain; next
// serves once commit gets to it. Nothing here fails.
func (r *Runtime) changeMode(key l4.VIPKey, old, next *vip, drain time.Duration) {
	r.detach(key, old, "a reload changed the VIP's mode")
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	m := &modeChange{old: old, next: next, from: old.cfg().Mode, to: next.cfg().Mode, since: now, until: now.Add(drain),
		cancel: cancel, done: make(chan struct{})}
	old.stopped.Store(true)
	old.served.poke()
	// A proxy VIP's guard entry is the new xdp plane's now (it wrote over
	// it); an old xdp plane keeps the entry while it drains, and the new
	// proxy VIP's guard writes it afterwards.
	old.guard.Yield()
	if mc, ok := old.dp.(plane.ModeChange); ok {
		next.guard.Wait(true)
		mc.Yield()
	} else {
		old.dp.StopAccepting() // the listener closes; its connections go on
	}
	r.modeChanges[key] = m
	r.log.Info("vip mode changed: new flows take the new plane, established flows stay on the old one until they end",
		zap.String("vip", old.name()), zap.Stringer("from", m.from), zap.Stringer("to", m.to), zap.Duration("drain_timeout", drain))
	r.drainLater(old, ctx, func(reset int) {
		cancel()
		next.guard.Wait(false)
		if mc, ok := next.dp.(plane.ModeChange); ok {
			mc.Inherit(false)
		}
		close(m.done)
		r.log.Info("vip mode change done: the old plane is gone", zap.String("vip", old.name()), zap.Stringer("from", m.from),
			zap.Int("reset", reset), zap.Duration("took", time.Since(m.since).Round(time.Millisecond)))
	})
}

// endModeChange cuts the drain of the plane an earlier mode change of
// key left, and waits until that plane is gone (mu held: the drain's end
// takes mu only after done). A VIP that changes mode again, or a new VIP
// on the address, must not meet it: it would delete their XDP entry.
func (r *Runtime) endModeChange(key l4.VIPKey) {
	m := r.modeChanges[key]
	if m == nil {
		return
	}
	r.log.Warn("vip mode change cut short: its old plane's flows end now", zap.String("vip", m.old.name()), zap.Stringer("from", m.from))
	delete(r.modeChanges, key)
	m.cancel()
	<-m.done
}

// status is the mode change as the old plane's status entry shows it.
func (m *modeChange) status() *plane.ModeChangeStatus {
	return &plane.ModeChangeStatus{From: m.from.String(), To: m.to.String(), Since: m.since, Until: m.until}
}
