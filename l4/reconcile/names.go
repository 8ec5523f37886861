// Named backends, the loop's side: each VIP runs with its names' last
// good answers, and a VIP whose names answer something new is planned
// again, as a reload of it would be. Watching the names is Names' job.

package reconcile

import (
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// Names keeps the DNS names of a config's named backends looked up
// (internal/names.Names is the one l4lb runs with).
type Names interface {
	// Watch starts watching cfg's names and returns what waits a little
	// for the first answers of new ones (Apply runs it without its lock).
	Watch(cfg *config.Config) (wait func())
	// Prune stops watching the names cfg does not use.
	Prune(cfg *config.Config)
	// Expand returns vc with each named backend replaced by one backend
	// per address of its name's last good answer.
	Expand(vc *config.VIP) *config.VIP
	// Changed receives a value when some name has a new answer;
	// TakeChanged then says which VIPs use one (nil: none).
	Changed() <-chan struct{}
	TakeChanged() func(vc *config.VIP) bool
	// Status describes the names of vc's named backends.
	Status(vc *config.VIP, now time.Time) []plane.NameStatus
	// Stop stops watching every name.
	Stop()
}

// hasNamed reports whether some backend of cfg is named.
func hasNamed(cfg *config.Config) bool {
	for i := range cfg.VIPs {
		if slices.ContainsFunc(cfg.VIPs[i].Backends, config.Backend.IsNamed) {
			return true
		}
	}
	return false
}

// expand is vc as it runs: its named backends expanded.
func (r *Runtime) expand(vc *config.VIP) *config.VIP {
	if r.names == nil {
		return vc // Apply refuses named backends without Names
	}
	return r.names.Expand(vc)
}

// startNames starts the goroutine that applies new answers.
func (r *Runtime) startNames() {
	if r.names != nil {
		r.namesStop, r.namesDone = make(chan struct{}), make(chan struct{})
		go r.runNames(r.namesStop, r.namesDone)
	}
}

// stopNames stops watching the names and the goroutine that applies
// their answers; it runs without r.mu (the goroutine may be waiting for
// it).
func (r *Runtime) stopNames(stop, done chan struct{}) {
	if r.names != nil {
		r.names.Stop()
	}
	if stop != nil {
		close(stop)
		<-done
	}
}

// runNames applies new answers as they come, until stop.
func (r *Runtime) runNames(stop, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		case <-r.names.Changed():
			r.applyNames()
		}
	}
}

// applyNames re-plans the VIPs whose names answered something new, as a
// reload of those VIPs would: kept addresses keep their backends,
// removed ones stop taking new flows and their established flows stay
// until they end.
func (r *Runtime) applyNames() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.cfg == nil {
		return
	}
	uses := r.names.TakeChanged()
	if uses == nil {
		return
	}
	for i := range r.cfg.VIPs {
		tv := &r.cfg.VIPs[i]
		v, ok := r.vips[tv.Key()]
		if !ok || !uses(tv) {
			continue
		}
		vc := r.names.Expand(tv)
		p, err := v.plan(vc)
		if err != nil {
			v.log.Error("backends from DNS not applied", zap.Error(err))
			continue
		}
		before := backendCount(v)
		v.apply(p)
		r.syncHealth(v, p.removed)
		v.log.Info("backends changed by DNS", zap.Strings("backends", idList(maps.Keys(p.backends))), zap.Int("before", before))
	}
	if r.xdp != nil {
		r.xdp.Settle()
	}
}

func backendCount(v *vip) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.backends)
}

func idList(ids func(func(l4.BackendID) bool)) []string {
	var out []string
	for id := range ids {
		out = append(out, string(id))
	}
	slices.Sort(out)
	return out
}
