// Failover beyond the serving set's basics: non-preemptive failover
// (backup_mode = "sticky"), what the backups' connections do when the
// primaries return (on_backup_recovered), the cap on passive ejections
// (max_ejected) and panic mode (panic_mode).

package reconcile

import (
	"cmp"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// servingPanic: health left no backend, panic_mode sends new flows to
// the backends down by health.
const servingPanic = "panic"

// stickyState is the running order of a backup_mode = "sticky" VIP: the
// backend that serves, and who comes next. Owned by the VIP (v.mu held);
// a plan works on a clone.
type stickyState struct {
	active l4.BackendID
	// order is who takes over next: file order at first, a backend that
	// comes back (eligible again) moves to its end.
	order []l4.BackendID
	// was: the backends that were eligible at the last choice.
	was map[l4.BackendID]bool
}

func (st *stickyState) clone() *stickyState {
	if st == nil {
		return nil
	}
	return &stickyState{active: st.active, order: slices.Clone(st.order), was: cloneSet(st.was)}
}

func cloneSet(m map[l4.BackendID]bool) map[l4.BackendID]bool {
	out := make(map[l4.BackendID]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// choose returns the backend that serves new flows among eligible (in
// file order), and updates the order: the serving backend stays while it
// is eligible; otherwise the first eligible one in the order takes over.
// A nil state (a what-if question) answers with the first eligible one.
func (st *stickyState) choose(all []l4.BackendID, eligible []*backend) *backend {
	if len(eligible) == 0 && st == nil {
		return nil
	}
	if st == nil {
		return eligible[0]
	}
	known := make(map[l4.BackendID]bool, len(all))
	for _, id := range all {
		known[id] = true
	}
	// Backends a reload removed leave the order; new ones join its end.
	st.order = slices.DeleteFunc(st.order, func(id l4.BackendID) bool { return !known[id] })
	for _, id := range all {
		if !slices.Contains(st.order, id) {
			st.order = append(st.order, id)
		}
	}
	now := make(map[l4.BackendID]*backend, len(eligible))
	for _, b := range eligible {
		now[b.b.ID] = b
	}
	if st.was != nil {
		// A backend that came back joins the end: it serves again only
		// when every one before it failed.
		var back []l4.BackendID
		st.order = slices.DeleteFunc(st.order, func(id l4.BackendID) bool {
			if now[id] != nil && !st.was[id] && id != st.active {
				back = append(back, id)
				return true
			}
			return false
		})
		st.order = append(st.order, back...)
	}
	st.was = make(map[l4.BackendID]bool, len(now))
	for id := range now {
		st.was[id] = true
	}
	if b := now[st.active]; b != nil {
		return b
	}
	for _, id := range st.order {
		if b := now[id]; b != nil {
			st.active = id
			return b
		}
	}
	st.active = ""
	return nil
}

// panicSet returns the backends panic_mode sends new flows to when health
// left none: those out only because of health (no operator override,
// weight above 0), the primaries among them if any, else the backups.
func panicSet(bs map[l4.BackendID]*backend, vc *config.VIP) []*backend {
	if !vc.Health.PanicMode {
		return nil
	}
	var primaries, backups []*backend
	for _, bc := range vc.Backends {
		b, ok := bs[l4.BackendID(bc.ID())]
		if !ok || b.weight == 0 || b.override.state != l4.OverrideNone || !b.down() {
			continue
		}
		if b.conf.Backup {
			backups = append(backups, b)
		} else {
			primaries = append(primaries, b)
		}
	}
	if len(primaries) > 0 {
		return primaries
	}
	return backups
}

// capEjections keeps in the backends that passive marks took out beyond
// max_ejected percent of the VIP's backends (rounded down, at least one
// unless it is 0): the earliest marks eject,
// later ones are kept until an earlier one ends. It returns the backends
// newly kept in (for the log) and whether any backend's state changed.
func capEjections(bs map[l4.BackendID]*backend, vc *config.VIP) (kept []*backend, changed bool) {
	var marked []*backend
	for _, b := range bs {
		if b.health == l4.HealthDown && b.passive {
			marked = append(marked, b)
		} else if b.ejectKept {
			b.ejectKept, changed = false, true
		}
	}
	slices.SortFunc(marked, func(a, b *backend) int {
		return cmp.Or(a.downAt.Compare(b.downAt), cmp.Compare(a.b.ID, b.b.ID))
	})
	allowed := len(bs) * vc.Health.MaxEjected / 100
	if vc.Health.MaxEjected > 0 {
		allowed = max(allowed, 1) // as Envoy: at least one, so a single backend's marks still count
	}
	for i, b := range marked {
		keep := i >= allowed
		if keep != b.ejectKept {
			b.ejectKept, changed = keep, true
			if keep {
				kept = append(kept, b)
			}
		}
	}
	return kept, changed
}

// capEjectionsLocked applies capEjections to the running backends and
// logs the marks it overrules (v.mu held).
func (v *vip) capEjectionsLocked() {
	vc := v.cfg()
	kept, changed := capEjections(v.backends, vc)
	if !changed {
		return
	}
	for _, b := range v.backends {
		b.b.SetEligible(b.keepsPinned())
	}
	for _, b := range kept {
		v.ejectCapped.Add(1)
		v.log.Warn("passive mark over max_ejected: backend kept in", zap.String("backend", string(b.b.ID)),
			zap.Int("max_ejected_percent", vc.Health.MaxEjected), zap.Int("backends", len(v.backends)))
	}
}

// confirmDown: an active check failed on a backend a passive mark took
// down; the mark is no longer only passive, so max_ejected no longer
// keeps it in.
func (v *vip) confirmDown(id l4.BackendID) {
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.backends[id]
	if !ok || !b.passive {
		return
	}
	b.passive = false
	if b.ejectKept {
		_ = v.rebuildLocked() // logged there
	}
}

// servingChanged follows the serving set from one published snapshot to
// the next (v.mu held): it logs panic mode's start and end loudly, and
// applies on_backup_recovered when new flows go back to the primaries.
func (v *vip) servingChanged(serving string) {
	was := v.serving
	v.serving = serving
	if was == serving {
		return
	}
	vc := v.cfg()
	switch {
	case serving == servingPanic:
		v.panics.Add(1)
		v.panicSince = time.Now()
		v.log.Error("PANIC: health leaves no backend for new flows; panic_mode sends them to the backends down by health",
			zap.Int("backends", len(v.backends)))
	case was == servingPanic:
		v.log.Warn("panic mode over: a backend is eligible again", zap.String("serving", serving),
			zap.Duration("panicked_for", time.Since(v.panicSince).Round(time.Millisecond)))
	}
	if was != servingBackups || serving != servingPrimaries || vc.BackupMode == l4.BackupSticky || vc.OnBackupRecovered == l4.BackupRecoveredKeep {
		return
	}
	var backups []*l4.Backend
	for _, b := range v.backends {
		if b.conf.Backup {
			backups = append(backups, b.b)
		}
	}
	go v.closeBackups(backups, vc.OnBackupRecovered)
}

// closeBackups ends the backups' connections as on_backup_recovered asks.
func (v *vip) closeBackups(backups []*l4.Backend, how l4.OnBackupRecovered) {
	if how == l4.BackupRecoveredGraceful {
		n := 0
		for _, b := range backups {
			k, err := v.dp.CloseSome(b, math.MaxInt, false)
			if err != nil {
				v.log.Info("on_backup_recovered graceful: the data plane keeps the flows", zap.String("backend", string(b.ID)), zap.Error(err))
				continue
			}
			n += k
		}
		v.backupCloses.Add(uint64(n))
		v.log.Info("primaries back: closing the backups' connections at a boundary", zap.Int("closing", n))
		return
	}
	n := v.dp.ResetWhere(func(x *l4.Backend) bool { return slices.Contains(backups, x) }, l4.EndPrimaryBack)
	v.backupCloses.Add(uint64(n))
	v.log.Info("primaries back: the backups' connections reset (on_backup_recovered = close)", zap.Int("reset", n))
}

// failoverStatus is the VIP's failover counters for status: always
// there, so that the metrics' series exist before the first event.
func (v *vip) failoverStatus() *plane.FailoverStatus {
	return &plane.FailoverStatus{Panics: v.panics.Load(), EjectionsCapped: v.ejectCapped.Load(), BackupCloses: v.backupCloses.Load()}
}
