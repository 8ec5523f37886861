// The daemon's part in an upgrade: the requests (SIGUSR2, the admin API),
// and what internal/upgrade asks of it on either side.

package daemon

import (
	"context"
	"errors"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/metrics"
	"github.com/l4lb/l4lb/internal/upgrade"
)

// upgradeRequest is an upgrade asked of the signal loop, which runs them
// one at a time with reloads.
type upgradeRequest struct {
	binary  string
	timeout time.Duration // 0: upgrade.StartTimeout
	reply   chan admin.UpgradeResult
}

// Upgrade is the admin API's POST /upgrade: the signal loop runs it.
func (d *daemon) Upgrade(ctx context.Context, req admin.UpgradeRequest) (admin.UpgradeResult, error) {
	u := upgradeRequest{binary: req.Binary, reply: make(chan admin.UpgradeResult, 1)}
	if req.Timeout != "" {
		u.timeout, _ = time.ParseDuration(req.Timeout) // checked by the API
	}
	select {
	case d.upgrades <- u:
	case <-d.stopping:
		return admin.UpgradeResult{}, errors.New("l4lb is shutting down: no upgrade")
	case <-ctx.Done():
		return admin.UpgradeResult{}, ctx.Err()
	}
	return <-u.reply, nil
}

// upgrade starts binary (default: the one this process was started from)
// and hands over to it (internal/upgrade); on success the loop exits once
// what stayed here has drained.
func (d *daemon) upgrade(binary string, timeout time.Duration) (admin.UpgradeResult, *upgrade.Successor) {
	old := &upgrade.Old{Log: d.log, Runtime: d.rt, Stops: d.sigs, Exe: d.exe, Admin: d.admin, Metrics: d.metricsLn, Commit: d.handOver}
	return old.Run(binary, timeout)
}

// handOver is the old process's point of no return: the new one becomes
// the service's main process and takes the admin socket and metrics.
func (d *daemon) handOver(newPID int) {
	d.tellManager(d.notify.mainPID(newPID))
	if d.admin != nil {
		d.admin.Handover() // admin clients wait in its listen queue until the new one serves
	}
	if d.metrics != nil {
		_ = d.metrics.Close()
		d.metrics, d.metricsLn = nil, nil
	}
}

// takeOver is the new process's side once every VIP serves: it adopts
// what the old one hands over, then becomes the main process.
func (d *daemon) takeOver(cfg *config.Config) {
	d.up.TakeOver(upgrade.Heir{Log: d.log, Runtime: d.rt, BecomeMain: func() bool { return d.becomeMain(cfg) }, Passed: d.passedOn})
}

// passedOn queues a stop or reload the previous l4lb passed on.
func (d *daemon) passedOn(stop bool, sig os.Signal) {
	if stop {
		offer(d.sigs.passed, sig)
	} else {
		offer(d.sigs.reload, sig)
	}
}

// becomeMain serves the admin API and metrics (on the sockets the old
// process passed, when the config still names them) and tells the
// service manager; it reports whether the passed admin socket is served.
func (d *daemon) becomeMain(cfg *config.Config) bool {
	n := d.up
	taken := false
	if p := cfg.Global.AdminSocket; p != "" {
		var err error
		if ln := n.AdminListener(p); ln != nil {
			d.admin, err = admin.ServeListener(ln, p, d, d.log.Named("admin"))
			taken = err == nil
		} else {
			d.admin, err = admin.Serve(p, d, d.log.Named("admin"))
		}
		if err != nil {
			d.log.Error("upgrade: admin socket not served", zap.String("admin_socket", p), zap.Error(err))
		}
	}
	if a := cfg.Global.MetricsListen; a != "" {
		var err error
		if d.metrics, d.metricsLn, err = metrics.Serve(a, n.MetricsListener(a), d.status, d.log.Named("metrics")); err != nil {
			d.log.Error("upgrade: metrics not served", zap.String("metrics_listen", a), zap.Error(err))
		}
	}
	n.CloseExtras()
	d.rt.ResumeReading() // also when the old process sent no sessions (it died)
	d.tellManager(d.notify.readyAsMain(os.Getpid()))
	return taken
}
