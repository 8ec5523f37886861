// The admin API's handlers, as the daemon answers them.

package daemon

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// Reload asks the signal loop for a reload (the admin API's POST /reload)
// and waits for its result.
func (d *daemon) Reload(ctx context.Context) (admin.ReloadResult, error) {
	reply := make(chan admin.ReloadResult, 1)
	select {
	case d.reloads <- reply:
	case <-d.stopping:
		return admin.ReloadResult{}, errors.New("l4lb is shutting down: no reload")
	case <-ctx.Done():
		return admin.ReloadResult{}, ctx.Err()
	}
	return <-reply, nil
}

// Status is the admin API's GET /status.
func (d *daemon) Status() plane.Status { return d.status() }

// ConfigTOML is the admin API's GET /config.
func (d *daemon) ConfigTOML() []byte { return config.Format(d.rt.Config(), config.FormatOptions{}) }

// SetOverride is the admin API's drain, disable and enable.
// With a state file, the override is on disk before the answer.
func (d *daemon) SetOverride(vip, backend string, o l4.Override, by string, force bool) (plane.OverrideResult, error) {
	res, err := d.rt.SetOverride(vip, backend, o, by, force)
	if err == nil && !res.Unchanged {
		d.flushState()
	}
	return res, err
}

// Explain is the admin API's GET /vips/{vip}/explain.
func (d *daemon) Explain(vip string, client netip.AddrPort) (plane.Explanation, error) {
	return d.rt.Explain(vip, client)
}

// Rebalance is the admin API's POST /vips/{vip}/rebalance.
func (d *daemon) Rebalance(vip string, o reconcile.RebalanceOptions) (plane.RebalanceStatus, error) {
	return d.rt.Rebalance(vip, o)
}

// RebalanceStatus is the admin API's GET /vips/{vip}/rebalance.
func (d *daemon) RebalanceStatus(vip string) (plane.RebalanceStatus, error) {
	return d.rt.RebalanceStatus(vip)
}

// StopRebalance is the admin API's DELETE /vips/{vip}/rebalance.
func (d *daemon) StopRebalance(vip, by string) (plane.RebalanceStatus, error) {
	return d.rt.StopRebalance(vip, by)
}

// Capture is the admin API's POST /vips/{vip}/capture.
func (d *daemon) Capture(ctx context.Context, vip string, req plane.CaptureRequest, emit func(plane.CapturedPacket) error) (plane.CaptureEnd, error) {
	return d.rt.Capture(ctx, vip, req, emit)
}

// status is the runtime's status with the process's own facts.
func (d *daemon) status() plane.Status {
	st := d.rt.Status()
	d.mu.Lock()
	last := d.lastReload
	d.mu.Unlock()
	st.BGP = d.bgpNow().Status()
	st.StateFile = d.stateStatus()
	st.FlowSync = d.flowSyncNow().status()
	st.Process = plane.ProcessStatus{
		Version: d.build.Version, Commit: d.build.Commit, GoVersion: d.build.GoVersion, BuildDate: d.build.BuildDate,
		PID: os.Getpid(), Started: d.started, UptimeSeconds: time.Since(d.started).Seconds(), LastReload: last,
		Capabilities: d.capabilityStatus(),
	}
	return st
}
