// [global] state_file: what a restart restores, and the writer that keeps
// it current; the admin API's run-time backend verbs, which write it
// before they answer.

package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/statefile"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// stateKeeper is the state file of a daemon that has one.
type stateKeeper struct {
	w *statefile.Writer
	// st is what the start restored or refused (its Path, Restored and
	// Refused); the writes come from w.
	st plane.StateFileStatus
}

// openState reads cfg's state file, if any, and starts its writer; the
// runtime does not exist yet, restoreState gives it what was read. A
// file that cannot be used is logged, kept aside as PATH.refused, and
// l4lb starts from the config file alone.
func (d *daemon) openState(cfg *config.Config) *statefile.State {
	path := cfg.Global.StateFile
	if path == "" {
		return nil
	}
	host, err := os.Hostname()
	if err != nil {
		d.log.Warn("state file: no host name; the file is tied to \"\"", zap.Error(err))
	}
	d.state = &stateKeeper{st: plane.StateFileStatus{Path: path}}
	st, err := statefile.Read(path, host)
	switch {
	case errors.Is(err, statefile.ErrRefused):
		aside := path + ".refused"
		if rerr := os.Rename(path, aside); rerr != nil {
			aside = ""
		}
		d.log.Error("state file refused: starting from the config file alone (run-time backend changes, overrides and health are not restored)",
			zap.String("state_file", path), zap.String("kept_as", aside), zap.Error(err))
		d.state.st.Refused = err.Error()
		st = nil
	case err != nil:
		d.log.Error("state file unreadable: starting from the config file alone", zap.String("state_file", path), zap.Error(err))
		d.state.st.Refused = err.Error()
		st = nil
	}
	by := fmt.Sprintf("l4lb %s (pid %d)", d.build.Version, os.Getpid())
	d.state.w = statefile.NewWriter(path, host, by, d.stateSnapshot, func(err error) {
		d.log.Warn("state file not written", zap.String("state_file", path), zap.Error(err))
	})
	return st
}

// restoreState gives the runtime what the state file kept, before its
// first Apply: the run-time backend changes, and (unless an upgrade
// passes fresher ones) the backends' health and overrides.
func (d *daemon) restoreState(st *statefile.State) {
	if st == nil {
		return
	}
	d.rt.RestoreBackendChanges(st.Changes)
	if d.up == nil {
		d.rt.Inherit(nil, st.Backends)
	}
	d.state.st.Restored = fmt.Sprintf("%d backend changes, %d backend states", len(st.Changes), len(st.Backends))
	d.log.Info("state file restored", zap.String("state_file", d.state.st.Path), zap.Int("backend_changes", len(st.Changes)), zap.Int("backends", len(st.Backends)))
}

// stateSnapshot is what the state file keeps now; nil (no write) before
// the runtime runs and once it stops, when it holds nothing to keep.
func (d *daemon) stateSnapshot() *statefile.State {
	rt := d.runtime()
	if rt == nil || rt.Stopping() || rt.Config() == nil {
		return nil
	}
	return &statefile.State{Changes: rt.BackendChanges(), Backends: rt.ExportBackends()}
}

// runtime is d.rt, read under d.mu: the state writer reads it from its
// own goroutine.
func (d *daemon) runtime() *reconcile.Runtime {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rt
}

// pokeState asks for a write of the state file, if there is one.
func (d *daemon) pokeState() {
	if d.state != nil {
		d.state.w.Poke()
	}
}

// flushState writes the state file now, if there is one: a verb's
// change is on disk before its answer.
func (d *daemon) flushState() {
	if d.state == nil {
		return
	}
	if err := d.state.w.Flush(); err != nil {
		d.log.Warn("state file not written", zap.String("state_file", d.state.st.Path), zap.Error(err))
	}
}

// stateStatus is the state file's part of status (nil: none).
func (d *daemon) stateStatus() *plane.StateFileStatus {
	if d.state == nil {
		return nil
	}
	st := d.state.st
	at, err := d.state.w.Last()
	st.Written = at
	if err != nil {
		st.Error = err.Error()
	}
	return &st
}

// AddBackend is the admin API's POST /vips/{vip}/backends.
func (d *daemon) AddBackend(vip string, c l4.BackendChange, by string) (plane.BackendChangeResult, error) {
	res, err := d.rt.AddBackend(vip, c, by)
	if err == nil {
		d.flushState()
	}
	return res, err
}

// SetBackend is the admin API's POST /vips/{vip}/backends/{backend}/set.
func (d *daemon) SetBackend(vip, backend string, s reconcile.BackendSet, by string) (plane.BackendChangeResult, error) {
	res, err := d.rt.SetBackend(vip, backend, s, by)
	if err == nil {
		d.flushState()
	}
	return res, err
}

// RemoveBackend is the admin API's POST /vips/{vip}/backends/{backend}/remove.
func (d *daemon) RemoveBackend(ctx context.Context, vip, backend string, wait time.Duration, force bool, by string) (plane.BackendChangeResult, error) {
	res, err := d.rt.RemoveBackend(ctx, vip, backend, wait, force, by)
	d.flushState() // the drain, at least, happened
	return res, err
}
