// The daemon: start (bind, serve, announce) and what it holds.

package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/announce"
	"github.com/l4lb/l4lb/internal/metrics"
	"github.com/l4lb/l4lb/internal/names"
	"github.com/l4lb/l4lb/internal/upgrade"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// Options is how `l4lb run` was asked to run.
type Options struct {
	Path      string    // the config file
	LogFormat string    // console or json: overrides the file's log_format
	Stderr    io.Writer // the log, and why l4lb could not start before it exists
	Build     Build
}

// Build describes the running binary, for status and metrics.
type Build struct {
	Version, Commit, GoVersion, BuildDate string
}

// Run runs l4lb with the config file at o.Path until a stop (SIGTERM,
// SIGINT) or an upgrade to a new binary ends it. Why it could not start
// is reported on o.Stderr (in the log, once that exists) and returned:
// the caller exits 1, and prints nothing more.
func Run(o Options) error {
	stderr, path := o.Stderr, o.Path
	// Before anything slow: a SIGHUP's default action would kill a daemon
	// that is still loading its config; caught now, it reloads once
	// started, and a SIGTERM shuts down once started.
	sigs := notifySignals()
	defer sigs.close()
	exe := upgrade.RunningBinary()
	up, err := upgrade.FromEnv()
	if err != nil {
		if !logStartErrorJSON(stderr, o.LogFormat, path, err) {
			fmt.Fprintln(stderr, "l4lb:", err)
		}
		return err
	}
	cfg, warnings, err := LoadChecked(path)
	if err != nil {
		if !logStartErrorJSON(stderr, o.LogFormat, path, err) {
			fmt.Fprintln(stderr, err) // a config's problems, one per line
		}
		up.Fail(err)
		return err
	}
	format := cfg.Global.LogFormat.String()
	if o.LogFormat != "" {
		format = o.LogFormat
	}
	log, level, err := newLogger(stderr, format, cfg.Global.LogLevel.String())
	if err != nil {
		fmt.Fprintln(stderr, "l4lb:", err)
		up.Fail(err)
		return err
	}
	defer log.Sync()
	d := &daemon{path: path, log: log, level: level, notify: newNotifier(), started: time.Now(), build: o.Build,
		exe: exe, up: up, sigs: sigs, reloads: make(chan chan admin.ReloadResult), upgrades: make(chan upgradeRequest), stopping: make(chan struct{})}
	d.logWarnings(warnings)
	if err := d.start(cfg); err != nil {
		log.Error("start failed", zap.Error(err))
		up.Fail(err)
		return err
	}
	// Bound and attached: what start needed and a reload does not goes.
	// A failed drop stops the daemon: it was asked to run without them.
	if err := d.dropCapabilities(cfg); err != nil {
		log.Error("start failed", zap.Error(err))
		d.stopServers()
		d.rt.Shutdown(context.Background())
		up.Fail(err)
		return err
	}
	if up != nil {
		d.takeOver(cfg)
	} else {
		d.tellManager(d.notify.ready())
	}
	d.loop(cfg)
	return nil
}

// daemon is one running l4lb process.
type daemon struct {
	path    string
	log     *zap.Logger
	level   zap.AtomicLevel
	started time.Time
	build   Build
	rt      *reconcile.Runtime
	bgp     *announce.Announcer // announces the served VIPs over BGP; set once start succeeds
	fsync   *flowSync           // flow sync with the peer balancers; set once start succeeds
	admin   *admin.Server
	metrics *http.Server
	notify  notifier
	// metricsLn is the metrics server's listener (an upgrade passes it on).
	metricsLn *net.TCPListener
	// exe is the binary this process was started from (an upgrade's default).
	exe string
	// up is the upgrade this process was started for (nil: an ordinary start).
	up *upgrade.New
	// sigs are the signals caught, and the requests passed on by the
	// previous l4lb after an upgrade.
	sigs *signals
	// reloads carries the admin API's reload requests to the signal loop,
	// so that they are serialized with SIGHUP, and upgrades its upgrade
	// requests; stopping is closed when the loop stops taking them.
	reloads  chan chan admin.ReloadResult
	upgrades chan upgradeRequest
	stopping chan struct{}
	// warned holds the config warnings the last load logged (without
	// their lines), so that a reload logs only new ones. Start and the
	// signal loop use it, one after the other.
	warned map[config.Problem]bool

	// state is [global] state_file's keeper (nil: none); set at start.
	state *stateKeeper

	mu          sync.Mutex
	lastReload  *plane.ReloadStatus // nil until the first SIGHUP
	capsDropped bool                // drop_capabilities took effect
}

// logStartErrorJSON logs why l4lb could not start before its logger
// exists as one JSON line, when --log-format json asks for JSON (the
// file's own log_format is unknown when the file does not load); it
// reports whether it did.
func logStartErrorJSON(stderr io.Writer, format, path string, err error) bool {
	if format != "json" {
		return false
	}
	log, _, lerr := newLogger(stderr, format, "info")
	if lerr != nil {
		return false
	}
	fields := []zap.Field{zap.String("config", path)}
	var ce *config.Error
	if errors.As(err, &ce) {
		problems := make([]string, len(ce.Problems))
		for i, p := range ce.Problems {
			problems[i] = p.String()
		}
		log.Error("start failed: config invalid", append(fields, zap.Strings("problems", problems))...)
	} else {
		log.Error("start failed", append(fields, zap.Error(err))...)
	}
	_ = log.Sync()
	return true
}

// start binds the admin socket and the metrics port, starts every VIP,
// then serves the admin API and metrics and starts BGP. The first two
// come first so that a clash with another l4lb fails before any VIP or
// probe starts.
func (d *daemon) start(cfg *config.Config) error {
	ctl, err := bindControl(cfg, d.up != nil)
	if err != nil {
		return err
	}
	if err := d.startVIPs(cfg); err != nil {
		ctl.close()
		return err
	}
	if err := d.serveControl(cfg, ctl); err != nil {
		d.rt.Shutdown(context.Background())
		return err
	}
	if err := d.startBGP(cfg); err != nil {
		return err
	}
	d.log.Info("l4lb running", zap.String("version", d.build.Version), zap.String("commit", d.build.Commit), zap.String("config", d.path),
		zap.Int("vips", len(cfg.VIPs)), zap.Int("pid", os.Getpid()), zap.Bool("upgrade", d.up != nil))
	return nil
}

// startVIPs makes the runtime and applies cfg (in an upgrade, on the
// sockets the old process passes).
func (d *daemon) startVIPs(cfg *config.Config) error {
	nofile, err := raiseFileLimit()
	if err != nil {
		d.log.Warn("cannot raise open file limit", zap.Error(err))
	}
	maxConns := proxy.BudgetForFiles(nofile)
	d.log.Info("connection limit from the open file limit", zap.Uint64("nofile", nofile), zap.Int("max_connections", maxConns))
	workers := eventLoops(cfg.Global.Workers)
	d.log.Info("event loops", zap.Int("workers", workers), zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)))
	rlog := d.log.Named("runtime")
	saved := d.openState(cfg)
	rt := reconcile.New(rlog, reconcile.Options{PipeSize: cfg.Global.PipeSize, MaxConns: maxConns, Workers: workers, Names: names.New(rlog), StateChanged: d.pokeState})
	d.mu.Lock()
	d.rt = rt
	d.mu.Unlock()
	d.restoreState(saved)
	if d.up != nil {
		// An upgrade: the VIPs the old process serves take its sockets.
		ls, backends, err := d.up.Listeners()
		if err != nil {
			d.rt.Shutdown(context.Background())
			return fmt.Errorf("upgrade: receiving the sockets: %w", err)
		}
		d.log.Info("upgrade: took the old process's sockets", zap.Int("sockets", ls.Len()), zap.Int("backends", len(backends)), zap.Int("pid", os.Getpid()))
		d.rt.Inherit(ls, backends)
		if changes := d.up.BackendChanges(); len(changes) > 0 {
			d.rt.RestoreBackendChanges(changes) // the old process's, fresher than any state file
		}
	}
	if err := d.rt.Apply(cfg); err != nil {
		if d.up != nil {
			d.rt.Shutdown(context.Background()) // its listeners are the old process's too: only ours close
		}
		return err
	}
	return nil
}

// controlSockets are the admin socket and the metrics listener, bound
// before anything else starts.
type controlSockets struct {
	admin   *net.UnixListener
	metrics net.Listener
}

// bindControl binds what cfg names; nothing in an upgrade, whose new
// process serves the old one's sockets once the old one is done
// (takeOver).
func bindControl(cfg *config.Config, upgrade bool) (*controlSockets, error) {
	c := &controlSockets{}
	if upgrade {
		return c, nil
	}
	if p := cfg.Global.AdminSocket; p != "" {
		ln, err := admin.Listen(p)
		if err != nil {
			return nil, err
		}
		c.admin = ln
	}
	if a := cfg.Global.MetricsListen; a != "" {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("metrics_listen %s: %w", a, err)
		}
		c.metrics = ln
	}
	return c, nil
}

// close closes what was not served (an admin socket's file goes with it).
func (c *controlSockets) close() {
	if c.admin != nil {
		c.admin.Close()
	}
	if c.metrics != nil {
		c.metrics.Close()
	}
}

// serveControl serves the admin API and metrics on the sockets bound.
func (d *daemon) serveControl(cfg *config.Config, c *controlSockets) error {
	if c.admin != nil {
		a, err := admin.ServeListener(c.admin, cfg.Global.AdminSocket, d, d.log.Named("admin"))
		if err != nil { // the listener is closed
			c.admin = nil
			c.close()
			return err
		}
		d.admin = a
	}
	if c.metrics != nil {
		m, ln, err := metrics.Serve(cfg.Global.MetricsListen, c.metrics, d.status, d.log.Named("metrics"))
		if err != nil {
			d.stopServers()
			return fmt.Errorf("metrics_listen %s: %w", cfg.Global.MetricsListen, err)
		}
		d.metrics, d.metricsLn = m, ln
	}
	return nil
}

// startBGP starts the announcer once the VIPs run, so that the first
// announcement already knows which have backends.
func (d *daemon) startBGP(cfg *config.Config) error {
	a, err := announce.Start(d.log.Named("bgp"), d.rt, cfg.BGP)
	if err != nil {
		d.stopServers()
		d.rt.Shutdown(context.Background())
		return fmt.Errorf("bgp: %w", err)
	}
	fs := &flowSync{log: d.log.Named("flowsync"), table: d.rt.FlowTable}
	if err := fs.apply(cfg.FlowSync); err != nil {
		a.Close()
		d.stopServers()
		d.rt.Shutdown(context.Background())
		return err
	}
	d.mu.Lock()
	d.bgp, d.fsync = a, fs
	d.mu.Unlock()
	return nil
}

// flowSyncNow is the daemon's flow sync; nil before start finished.
func (d *daemon) flowSyncNow() *flowSync {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fsync
}

// tellManager logs a failed service-manager notification: l4lb keeps
// serving either way.
func (d *daemon) tellManager(err error) {
	if err != nil {
		d.log.Warn("service manager notification failed", zap.Error(err))
	}
}

// stopServers closes the admin API and the metrics server.
func (d *daemon) stopServers() {
	if d.admin != nil {
		d.admin.Close()
	}
	if d.metrics != nil {
		_ = d.metrics.Close()
	}
}

// bgpNow is the daemon's announcer; nil before start finished (status
// may be asked earlier).
func (d *daemon) bgpNow() *announce.Announcer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bgp
}
