// Reloads: the file again, applied as a diff, or refused with the running
// config kept.

package daemon

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/l4/plane"
)

// reload applies the file again; a bad file leaves the running config.
func (d *daemon) reload(running *config.Config) (*config.Config, admin.ReloadResult) {
	cfg, warnings, restart, err := d.applyFile(running)
	d.noteReload(err)
	if err != nil {
		res := admin.ReloadResult{Error: err.Error()}
		var ce *config.Error
		if errors.As(err, &ce) {
			res.Error = "config invalid, running config kept"
			for _, p := range ce.Problems {
				res.Problems = append(res.Problems, p.String())
			}
		}
		return running, res
	}
	if err := setLevel(d.level, cfg.Global.LogLevel.String()); err != nil {
		d.log.Warn("log level unchanged", zap.Error(err))
	}
	res := admin.ReloadResult{OK: true, VIPs: len(cfg.VIPs), RestartOnly: restart}
	for _, w := range res.RestartOnly {
		d.log.Warn("setting changed but takes effect only after a restart", zap.String("key", w))
	}
	for _, w := range warnings {
		res.Warnings = append(res.Warnings, w.String())
	}
	d.log.Info("reload applied", zap.Int("vips", len(cfg.VIPs)))
	return cfg, res
}

// logWarnings logs what the config allows but is probably wrong: at start
// every warning, on a reload only those the last load did not have (the
// others are counted in one info line), so that a file left as it was
// does not repeat its warnings on every reload. A warning is the same
// when only its line moved.
func (d *daemon) logWarnings(warnings []config.Problem) {
	next := make(map[config.Problem]bool, len(warnings))
	repeated := 0
	for _, w := range warnings {
		k := w
		k.Line = 0
		if next[k] {
			continue
		}
		next[k] = true
		if d.warned[k] {
			repeated++
			continue
		}
		d.log.Warn("config warning", zap.String("warning", w.String()))
	}
	if repeated > 0 {
		d.log.Info("config warnings as before, not repeated", zap.Int("warnings", repeated), zap.String("list", "l4lb check "+d.path))
	}
	d.warned = next
}

// applyFile loads the file and applies it, logging why when it cannot. It
// returns the config now in force (the file's, with the running values
// of the settings that need a restart, listed in restart).
func (d *daemon) applyFile(running *config.Config) (cfg *config.Config, warnings []config.Problem, restart []string, err error) {
	cfg, warnings, err = LoadChecked(d.path)
	if err == nil {
		var problems []config.Problem
		if cfg, restart, problems = config.PlanReload(running, cfg); len(problems) > 0 {
			err = &config.Error{Problems: problems}
		}
	}
	if err != nil {
		d.log.Error("reload refused: config invalid, running config kept", zap.Error(err))
		return nil, nil, nil, err
	}
	d.logWarnings(warnings)
	if err := d.rt.Apply(cfg); err != nil {
		d.log.Error("reload failed, running config kept", zap.Error(err))
		return nil, nil, nil, err
	}
	if err := d.bgpNow().Reconfigure(cfg.BGP); err != nil {
		d.log.Error("reload: bgp settings not fully applied", zap.Error(err))
	}
	if err := d.flowSyncNow().apply(cfg.FlowSync); err != nil {
		d.log.Error("reload: flow sync not running", zap.Error(err))
	}
	return cfg, warnings, restart, nil
}

// noteReload records a reload's time and result for status and metrics.
func (d *daemon) noteReload(err error) {
	r := &plane.ReloadStatus{Time: time.Now(), OK: err == nil}
	if err != nil {
		r.Error = err.Error()
	}
	d.mu.Lock()
	d.lastReload = r
	d.mu.Unlock()
}
