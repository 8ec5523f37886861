// Run-time backend changes (`l4lb backend add|set|remove`): overrides on
// top of the file, applied as a reload applies the file, kept across
// reloads that leave their backend as it was.

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// Errors of the backend verbs a caller can tell apart.
var (
	// ErrInvalid: the change makes the config invalid, in the words a
	// file with it would get (the admin API answers 422).
	ErrInvalid = errors.New("refused")
	// ErrExists: the backend was added at run time already (409).
	ErrExists = errors.New("already added")
)

// backendChanges is the file as last applied and the changes laid over
// it. A published value is never changed: writers (under applyMu) store
// a new one, readers (status) load it without a lock.
type backendChanges struct {
	file *config.Config
	list []l4.BackendChange
}

// changesNow returns the changes in force and the file they lie on (nil
// before the first Apply).
func (r *Runtime) changesNow() *backendChanges {
	if c := r.changes.Load(); c != nil {
		return c
	}
	return &backendChanges{}
}

// BackendChanges returns the run-time backend changes in force, in order.
func (r *Runtime) BackendChanges() []l4.BackendChange {
	return slices.Clone(r.changesNow().list)
}

// RestoreBackendChanges gives the next Apply changes a state file kept:
// Apply lays over its file those the file leaves applicable and logs
// the others.
func (r *Runtime) RestoreBackendChanges(list []l4.BackendChange) {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	c := *r.changesNow()
	c.list = slices.Clone(list)
	r.changes.Store(&c)
}

// applyFile applies file with the changes in force laid over it (applyMu
// held): the changes the file ends are dropped, and logged.
func (r *Runtime) applyFile(file *config.Config) error {
	cfg, kept, dropped := config.RebaseBackendChanges(file, r.changesNow().list)
	if err := r.applyLocked(cfg); err != nil {
		if len(kept) == 0 {
			return err
		}
		// The changes must never keep the file from applying (nor l4lb
		// from starting with what a state file kept): the file alone.
		r.log.Error("the run-time backend changes cannot be applied with this file: applying the file alone", zap.Error(err))
		if err := r.applyLocked(file); err != nil {
			return err
		}
		for _, c := range kept {
			dropped = append(dropped, config.DroppedChange{Change: c, Why: "applying it failed: " + err.Error()})
		}
		kept = nil
	}
	for _, d := range dropped {
		r.log.Info("run-time backend change ended", zap.String("vip", d.Change.VIP), zap.String("backend", d.Change.Backend),
			zap.String("change", changeText(&d.Change, nil)), zap.String("by", d.Change.By), zap.String("why", d.Why))
	}
	r.changes.Store(&backendChanges{file: file, list: kept})
	if len(dropped) > 0 || len(kept) > 0 {
		r.stateChanged()
	}
	return nil
}

// stateChanged tells the state file's writer that what it keeps changed.
func (r *Runtime) stateChanged() {
	if r.opts.StateChanged != nil {
		r.opts.StateChanged()
	}
}

// setChanges applies next over the file (applyMu held); a change the
// file's checks refuse is ErrInvalid with their words.
func (r *Runtime) setChanges(next []l4.BackendChange) error {
	cur := r.changesNow()
	if cur.file == nil {
		return errors.New("no config applied yet")
	}
	cfg, err := config.WithBackendChanges(cur.file, next)
	switch {
	case errors.Is(err, config.ErrNoFileBackend):
		return fmt.Errorf("%w (a backend of a DNS name changes in the file)", ErrNoBackend)
	case err != nil:
		return fmt.Errorf("%w: %s", ErrInvalid, config.ProblemsText(err))
	}
	if err := r.applyLocked(cfg); err != nil {
		return err
	}
	r.changes.Store(&backendChanges{file: cur.file, list: next})
	r.stateChanged()
	return nil
}

// AddBackend adds a backend to the VIP named vipName: c holds its
// address, name, backup, weight and max_conns; by says who.
func (r *Runtime) AddBackend(vipName string, c l4.BackendChange, by string) (plane.BackendChangeResult, error) {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if r.vipNamed(vipName) == nil || r.changesNow().file.VIP(vipName) == nil {
		return plane.BackendChangeResult{}, fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	c.VIP, c.Added, c.Removed, c.File, c.By, c.Since = vipName, true, false, "", by, time.Now()
	c.Backend = c.Name
	if c.Backend == "" {
		c.Backend = c.Address
		if ap, err := netip.ParseAddrPort(c.Address); err == nil {
			c.Backend = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
		}
	}
	list := r.BackendChanges()
	if slices.ContainsFunc(list, func(o l4.BackendChange) bool { return o.Same(&c) }) {
		return plane.BackendChangeResult{}, fmt.Errorf("vip %q: backend %q: %w at run time (backend set changes it)", vipName, c.Backend, ErrExists)
	}
	if err := r.setChanges(append(list, c)); err != nil {
		return plane.BackendChangeResult{}, fmt.Errorf("vip %q: backend %q: %w", vipName, c.Backend, err)
	}
	r.log.Info("backend added at run time", zap.String("vip", vipName), zap.String("backend", c.Backend), zap.String("address", c.Address),
		zap.String("change", changeText(&c, nil)), zap.String("by", by))
	return r.changeResult(&c, by), nil
}

// BackendSet is what `backend set` asks: a weight and/or a cap, or
// Reset: the file's values again.
type BackendSet struct {
	Weight, MaxConns *int
	Reset            bool
}

// SetBackend sets the weight or max_conns of backend ref (a name, an
// address or an IP, as drain takes) of the VIP named vipName, or resets
// it to the file's.
func (r *Runtime) SetBackend(vipName, ref string, s BackendSet, by string) (plane.BackendChangeResult, error) {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	id, err := r.resolveBackend(vipName, ref)
	if err != nil {
		return plane.BackendChangeResult{}, err
	}
	list := r.BackendChanges()
	cur := r.changesNow()
	next, c, err := setChange(cur.file, list, vipName, id, s, by)
	if err != nil {
		return plane.BackendChangeResult{}, fmt.Errorf("vip %q: backend %q: %w", vipName, id, err)
	}
	if slices.EqualFunc(next, list, sameChange) {
		res := r.changeResult(c, by)
		res.Unchanged = true
		return res, nil
	}
	if err := r.setChanges(next); err != nil {
		return plane.BackendChangeResult{}, fmt.Errorf("vip %q: backend %q: %w", vipName, id, err)
	}
	res := r.changeResult(c, by)
	r.log.Info("backend changed at run time", zap.String("vip", vipName), zap.String("backend", id), zap.String("change", res.Change), zap.String("by", by))
	return res, nil
}

// sameChange compares two changes but for who made them and when.
func sameChange(a, b l4.BackendChange) bool {
	a.By, a.Since, b.By, b.Since = "", time.Time{}, "", time.Time{}
	eq := func(x, y *int) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.Weight, b.Weight) && eq(a.MaxConns, b.MaxConns) &&
		a.VIP == b.VIP && a.Backend == b.Backend && a.Added == b.Added && a.Removed == b.Removed &&
		a.Address == b.Address && a.Name == b.Name && a.Backup == b.Backup && a.File == b.File
}

// setChange returns list with backend id's weight or cap set (or reset),
// and the change that stands for the backend after it (its file values
// when none does).
func setChange(file *config.Config, list []l4.BackendChange, vipName, id string, s BackendSet, by string) ([]l4.BackendChange, *l4.BackendChange, error) {
	next := slices.Clone(list)
	now := time.Now()
	if i := slices.IndexFunc(next, func(o l4.BackendChange) bool { return o.VIP == vipName && o.Backend == id && o.Added }); i >= 0 {
		if s.Reset {
			return nil, nil, errors.New("added at run time, the file has no values for it: `l4lb backend remove` takes it out")
		}
		c := next[i]
		c.Weight, c.MaxConns = pick(s.Weight, c.Weight), pick(s.MaxConns, c.MaxConns)
		if !sameChange(c, next[i]) {
			c.By, c.Since = by, now
		}
		next[i] = c
		return next, &c, nil
	}
	fb := config.FileBackend(file, vipName, id)
	if fb == nil {
		return nil, nil, fmt.Errorf("%w (a backend of a DNS name changes in the file)", ErrNoBackend)
	}
	i := slices.IndexFunc(next, func(o l4.BackendChange) bool { return o.VIP == vipName && o.Backend == id && !o.Added })
	c := l4.BackendChange{VIP: vipName, Backend: id, File: config.BackendText(fb), By: by, Since: now}
	if i >= 0 {
		c = next[i]
		next = slices.Delete(next, i, i+1)
	}
	if !s.Reset {
		c.Weight, c.MaxConns = pick(s.Weight, c.Weight), pick(s.MaxConns, c.MaxConns)
		if c.Weight != nil && *c.Weight == fb.Weight {
			c.Weight = nil // the file's value: nothing to keep
		}
		if c.MaxConns != nil && *c.MaxConns == fb.MaxConns {
			c.MaxConns = nil
		}
	}
	if s.Reset || c.Weight == nil && c.MaxConns == nil && !c.Removed {
		return next, &l4.BackendChange{VIP: vipName, Backend: id}, nil
	}
	if i < 0 {
		return append(next, c), &c, nil // a new change goes last
	}
	if !sameChange(c, list[i]) {
		c.By, c.Since = by, now
	}
	return slices.Insert(next, i, c), &c, nil // in its place
}

// pick is v when set, else old.
func pick(v, old *int) *int {
	if v != nil {
		n := *v
		return &n
	}
	return old
}

// RemoveBackend drains backend ref of the VIP named vipName, waits until
// its live flows end or wait passes (or ctx ends), then removes it: a
// backend added at run time goes, a file backend is kept out until a
// reload changes it in the file or a reset. force drains past the
// capacity guard (as `drain --force`).
func (r *Runtime) RemoveBackend(ctx context.Context, vipName, ref string, wait time.Duration, force bool, by string) (plane.BackendChangeResult, error) {
	r.applyMu.Lock()
	id, err := r.resolveBackend(vipName, ref)
	var next []l4.BackendChange
	if err == nil {
		next, err = removeChange(r.changesNow().file, r.BackendChanges(), vipName, id, by)
	}
	if err == nil {
		if _, cerr := config.WithBackendChanges(r.changesNow().file, next); cerr != nil {
			err = fmt.Errorf("%w: %s", ErrInvalid, config.ProblemsText(cerr))
		}
	}
	r.applyMu.Unlock()
	if err != nil {
		return plane.BackendChangeResult{}, fmt.Errorf("vip %q: backend %q: %w", vipName, ref, err)
	}
	drain, err := r.SetOverride(vipName, id, l4.OverrideDrain, by, force)
	if err != nil {
		return plane.BackendChangeResult{}, err
	}
	start := time.Now()
	left := r.waitDrained(ctx, vipName, id, wait)
	waited := time.Since(start)

	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	next, err = removeChange(r.changesNow().file, r.BackendChanges(), vipName, id, by)
	if err == nil {
		err = r.setChanges(next)
	}
	if err != nil {
		return plane.BackendChangeResult{}, fmt.Errorf("vip %q: backend %q: drained, not removed: %w", vipName, id, err)
	}
	res := plane.BackendChangeResult{VIP: vipName, Backend: id, Address: drain.Address, Change: "removed", By: by,
		DrainedFrom: drain.LiveFlows, Waited: waited.Seconds(), LeftFlows: left, Forced: drain.Forced}
	r.log.Info("backend removed at run time", zap.String("vip", vipName), zap.String("backend", id), zap.String("by", by),
		zap.Int64("drained_from", res.DrainedFrom), zap.Duration("waited", waited), zap.Int64("left_flows", left))
	return res, nil
}

// removeChange returns list with backend id removed: an added one's
// change goes, a file backend's set becomes its removal.
func removeChange(file *config.Config, list []l4.BackendChange, vipName, id, by string) ([]l4.BackendChange, error) {
	next := slices.Clone(list)
	if i := slices.IndexFunc(next, func(o l4.BackendChange) bool { return o.VIP == vipName && o.Backend == id && o.Added }); i >= 0 {
		return slices.Delete(next, i, i+1), nil
	}
	fb := config.FileBackend(file, vipName, id)
	if fb == nil {
		return nil, fmt.Errorf("%w (a backend of a DNS name changes in the file)", ErrNoBackend)
	}
	next = slices.DeleteFunc(next, func(o l4.BackendChange) bool { return o.VIP == vipName && o.Backend == id })
	return append(next, l4.BackendChange{VIP: vipName, Backend: id, Removed: true, File: config.BackendText(fb), By: by, Since: time.Now()}), nil
}

// waitDrained waits until backend id of the VIP has no live flow, wait
// passes or ctx ends, and returns the live flows left.
func (r *Runtime) waitDrained(ctx context.Context, vipName, id string, wait time.Duration) int64 {
	live := func() int64 {
		v := r.vipNamed(vipName)
		if v == nil {
			return 0
		}
		v.mu.Lock()
		b := v.backends[l4.BackendID(id)]
		v.mu.Unlock()
		if b == nil {
			return 0
		}
		return v.liveOf(b.b)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		n := live()
		if n == 0 {
			return 0
		}
		select {
		case <-deadline.C:
			return n
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
	}
}

// resolveBackend returns the identity of the backend ref names in the
// running VIP vipName.
func (r *Runtime) resolveBackend(vipName, ref string) (string, error) {
	v := r.vipNamed(vipName)
	if v == nil {
		return "", fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	v.mu.Lock()
	b, err := v.resolveLocked(ref)
	v.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("vip %q: %w", vipName, err)
	}
	return string(b.b.ID), nil
}

// changeResult is the answer for change c, which now stands.
func (r *Runtime) changeResult(c *l4.BackendChange, by string) plane.BackendChangeResult {
	fb := config.FileBackend(r.changesNow().file, c.VIP, c.Backend)
	res := plane.BackendChangeResult{VIP: c.VIP, Backend: c.Backend, Change: changeText(c, fb), By: by}
	if c.Added {
		res.Address = c.Address
	} else if fb != nil {
		res.Address = fb.Address.String()
	}
	return res
}

// changeText says what c changes, for status and the log: fb is the
// file's backend when known.
func changeText(c *l4.BackendChange, fb *config.Backend) string {
	switch {
	case c.Added:
		return "added"
	case c.Removed:
		return "removed"
	}
	var parts []string
	if c.Weight != nil {
		parts = append(parts, fileValue("weight", *c.Weight, fb, func(b *config.Backend) int { return b.Weight }))
	}
	if c.MaxConns != nil {
		parts = append(parts, fileValue("max_conns", *c.MaxConns, fb, func(b *config.Backend) int { return b.MaxConns }))
	}
	if len(parts) == 0 {
		return "as in the file"
	}
	return strings.Join(parts, ", ")
}

func fileValue(key string, v int, fb *config.Backend, field func(*config.Backend) int) string {
	if fb == nil {
		return fmt.Sprintf("%s %d", key, v)
	}
	return fmt.Sprintf("%s %d (file %d)", key, v, field(fb))
}

// changeStatus marks the backends of vs that run-time changes added or
// set, with who and when.
func (r *Runtime) changeStatus(vs *plane.VIPStatus) {
	cur := r.changesNow()
	for i := range cur.list {
		c := &cur.list[i]
		if c.VIP != vs.Name || c.Removed {
			continue
		}
		for j := range vs.Backends {
			if b := &vs.Backends[j]; b.ID == c.Backend && !b.Removed {
				b.Change, b.ChangeBy, b.ChangeSince = changeText(c, config.FileBackend(cur.file, c.VIP, c.Backend)), c.By, c.Since
			}
		}
	}
}

// Stopping reports whether Shutdown began: what the runtime holds then is
// no state to keep.
func (r *Runtime) Stopping() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}
