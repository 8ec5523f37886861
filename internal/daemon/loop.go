// The signal loop: signals and the admin API's reloads and upgrades, one
// at a time, until a stop; then the drain.

package daemon

import (
	"context"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/upgrade"
)

// request is the next thing the signal loop does.
type request struct {
	stop    os.Signal               // stop (outranks the rest)
	reply   chan admin.ReloadResult // an API reload's answer
	upgrade bool                    // SIGUSR2 or the API's upgrade (up)
	up      *upgradeRequest
}

// next waits for the next request. A stop pending beside another wins.
func (d *daemon) next() request {
	var r request
	s := d.sigs
	select {
	case r.stop = <-s.stop:
	case r.stop = <-s.passed:
	case <-s.reload:
	case r.reply = <-d.reloads:
	case <-s.upgrade:
		r.upgrade = true
	case u := <-d.upgrades:
		r.upgrade, r.up = true, &u
	}
	if r.stop == nil {
		r.stop = s.pendingStop()
	}
	return r
}

// loop runs signals and the admin API's reloads and upgrades one at a
// time until a stop.
func (d *daemon) loop(cfg *config.Config) {
	for {
		r := d.next()
		switch {
		case r.stop != nil:
			d.refuse(r)
			d.stop(cfg, r.stop)
			return
		case r.upgrade:
			var binary string
			var timeout time.Duration
			if r.up != nil {
				binary, timeout = r.up.binary, r.up.timeout
			}
			res, next := d.upgrade(binary, timeout)
			if r.up != nil {
				r.up.reply <- res
			}
			if res.OK {
				d.exitAfterUpgrade(cfg, next)
				return
			}
		default:
			cfg = d.reloadPending(cfg, r.reply)
		}
	}
}

// refuse answers the API request a stop outranked.
func (d *daemon) refuse(r request) {
	if r.reply != nil {
		r.reply <- admin.ReloadResult{Error: "l4lb is shutting down: no reload"}
	}
	if r.up != nil {
		r.up.reply <- admin.UpgradeResult{OldPID: os.Getpid(), Error: "l4lb is shutting down: no upgrade", Stopping: true}
	}
}

// stop withdraws the VIPs from the routers and drains.
func (d *daemon) stop(cfg *config.Config, sig os.Signal) {
	close(d.stopping)
	d.tellManager(d.notify.stopping())
	d.log.Info("shutting down", zap.Stringer("signal", sig), zap.Duration("drain_timeout", cfg.Global.DrainTimeout))
	// Routers first: withdraw every VIP and give them shutdown_grace
	// to move new flows to the other balancers, then drain.
	d.bgp.Withdraw()
	d.shutdown(cfg.Global.DrainTimeout, nil, 1)
	d.bgp.Close()
	d.fsync.close()
}

// exitAfterUpgrade stops this process once a new one took over: its
// listeners are the new one's now, and the connections it kept drain for
// up to drain_timeout. The service manager follows the new process
// already: no STOPPING=1. Stops and reloads asked of this process
// meanwhile (also during the upgrade) are the service's: they go to the
// new one.
func (d *daemon) exitAfterUpgrade(cfg *config.Config, next *upgrade.Successor) {
	close(d.stopping)
	stops := d.passPending(next) // those that came during the upgrade
	d.log.Info("old process exiting after the upgrade", zap.Duration("drain_timeout", cfg.Global.DrainTimeout))
	// The new process runs its own speaker: this one's sessions close
	// now (without a withdraw: the new process announces the same
	// routes as soon as its session is up).
	d.bgp.Close()
	d.fsync.close() // the new process syncs (and holds the socket) now
	d.shutdown(cfg.Global.DrainTimeout, next, stops)
	next.Close()
}

// reloadPending applies the file once for every reload asked so far: the
// SIGHUPs and API reloads that arrived while the last one ran share this
// one (each API caller gets its result), so a burst of them costs one
// reload after the running one.
func (d *daemon) reloadPending(cfg *config.Config, first chan admin.ReloadResult) *config.Config {
	var replies []chan admin.ReloadResult
	if first != nil {
		replies = append(replies, first)
	}
	for taking := true; taking; {
		select {
		case r := <-d.reloads:
			replies = append(replies, r)
		case <-d.sigs.reload:
		default:
			taking = false
		}
	}
	cfg, res := d.reloadNotifying(cfg)
	for _, r := range replies {
		r <- res
	}
	return cfg
}

// reloadNotifying reloads, telling the service manager.
func (d *daemon) reloadNotifying(running *config.Config) (*config.Config, admin.ReloadResult) {
	d.tellManager(d.notify.reloading())
	defer func() { d.tellManager(d.notify.ready()) }()
	return d.reload(running)
}

// shutdown drains for up to drain; another SIGTERM/SIGINT cuts it short.
// stops is how many this process got already; next is the process an
// upgrade handed over to, if any (see duringDrain).
func (d *daemon) shutdown(drain time.Duration, next *upgrade.Successor, stops int) {
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		d.duringDrain(cancel, next, stops, done)
	}()
	start := time.Now()
	d.rt.Shutdown(ctx)
	d.stopServers()
	close(done)
	<-watched
	d.log.Info("stopped", zap.Duration("drained_for", time.Since(start)))
}

// duringDrain acts on the signals that arrive while this process drains,
// until done: a second SIGTERM/SIGINT resets what is left. A process that
// handed over to next passes every stop and reload on to it (they are
// the service's), also those that arrive as the drain ends.
func (d *daemon) duringDrain(cut context.CancelFunc, next *upgrade.Successor, stops int, done <-chan struct{}) {
	s := d.sigs
	for {
		select {
		case <-done:
			d.passPending(next)
			return
		case sig := <-s.stop:
			next.PassStop(sig)
			if stops++; stops == 2 {
				d.log.Warn("second signal: resetting remaining connections", zap.Stringer("signal", sig))
				cut()
			}
		case sig := <-s.passed: // this process is stopping already
			next.PassStop(sig)
		case sig := <-s.reload:
			if next == nil {
				d.log.Info("signal ignored during shutdown", zap.Stringer("signal", sig))
			}
			next.PassReload(sig)
		case sig := <-s.upgrade:
			d.log.Info("signal ignored during shutdown", zap.Stringer("signal", sig))
		}
	}
}

// passPending passes the stops and reloads waiting now on to next (none
// without one); it returns how many stops this process got among them.
func (d *daemon) passPending(next *upgrade.Successor) int {
	if next == nil {
		return 0
	}
	stops := 0
	for {
		select {
		case sig := <-d.sigs.stop:
			next.PassStop(sig)
			stops++
		case sig := <-d.sigs.passed:
			next.PassStop(sig)
		case sig := <-d.sigs.reload:
			next.PassReload(sig)
		default:
			return stops
		}
	}
}
