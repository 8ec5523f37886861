// `l4lb run`: the daemon, its signals and its reloads.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/names"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// daemon is one running l4lb process.
type daemon struct {
	path    string
	log     *zap.Logger
	level   zap.AtomicLevel
	started time.Time
	build   buildInfo
	rt      *reconcile.Runtime
	bgp     *announcer // announces the served VIPs over BGP; set once start succeeds
	admin   *admin.Server
	metrics *http.Server
	notify  notifier
	// metricsLn is the metrics server's listener (an upgrade passes it on).
	metricsLn *net.TCPListener
	// exe is the binary this process was started from (an upgrade's default).
	exe string
	// up is the upgrade this process was started for (nil: an ordinary start).
	up *newSide
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

	mu          sync.Mutex
	lastReload  *plane.ReloadStatus // nil until the first SIGHUP
	capsDropped bool                // drop_capabilities took effect
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	f := newFlags("run", stdout, stderr)
	configFlag := f.String("config", "", "config file (default "+defaultConfigPath+"; or give it as the argument)")
	logFormat := f.String("log-format", "", "console or json (overrides the config file)")
	if code, ok := f.parse(args); !ok {
		return code
	}
	path, ok := f.configPath(*configFlag)
	if !ok {
		return 2
	}
	// Before anything slow: a SIGHUP's default action would kill a daemon
	// that is still loading its config; caught now, it reloads once
	// started, and a SIGTERM shuts down once started.
	sigs := notifySignals()
	defer sigs.close()
	exe := runningBinary()
	up, err := takeoverFromEnv()
	if err != nil {
		if !logStartErrorJSON(stderr, *logFormat, path, err) {
			fmt.Fprintln(stderr, "l4lb:", err)
		}
		return 1
	}
	cfg, warnings, err := loadChecked(path)
	if err != nil {
		if !logStartErrorJSON(stderr, *logFormat, path, err) {
			fmt.Fprintln(stderr, err) // a config's problems, one per line
		}
		up.fail(err)
		return 1
	}
	format := cfg.Global.LogFormat.String()
	if *logFormat != "" {
		format = *logFormat
	}
	log, level, err := newLogger(stderr, format, cfg.Global.LogLevel.String())
	if err != nil {
		fmt.Fprintln(stderr, "l4lb:", err)
		up.fail(err)
		return 1
	}
	defer log.Sync()
	d := &daemon{path: path, log: log, level: level, notify: newNotifier(), started: time.Now(), build: readBuildInfo(),
		exe: exe, up: up, sigs: sigs, reloads: make(chan chan admin.ReloadResult), upgrades: make(chan upgradeRequest), stopping: make(chan struct{})}
	d.logWarnings(warnings)
	if err := d.start(cfg); err != nil {
		log.Error("start failed", zap.Error(err))
		up.fail(err)
		return 1
	}
	// Bound and attached: what start needed and a reload does not goes.
	// A failed drop stops the daemon: it was asked to run without them.
	if err := d.dropCapabilities(cfg); err != nil {
		log.Error("start failed", zap.Error(err))
		d.stopServers()
		d.rt.Shutdown(context.Background())
		up.fail(err)
		return 1
	}
	if up != nil {
		d.takeOver(cfg)
	} else {
		d.tellManager(d.notify.ready())
	}
	return d.loop(cfg)
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
	d.rt = reconcile.New(rlog, reconcile.Options{PipeSize: cfg.Global.PipeSize, MaxConns: maxConns, Workers: workers, Names: names.New(rlog)})
	if d.up != nil {
		// An upgrade: the VIPs the old process serves take its sockets.
		ls, backends, err := d.up.listeners()
		if err != nil {
			d.rt.Shutdown(context.Background())
			return fmt.Errorf("upgrade: receiving the sockets: %w", err)
		}
		d.log.Info("upgrade: took the old process's sockets", zap.Int("sockets", ls.Len()), zap.Int("backends", len(backends)), zap.Int("pid", os.Getpid()))
		d.rt.Inherit(ls, backends)
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
		m, ln, err := startMetrics(cfg.Global.MetricsListen, c.metrics, d, d.log.Named("metrics"))
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
	a, err := startAnnouncer(d.log.Named("bgp"), d.rt, cfg.BGP)
	if err != nil {
		d.stopServers()
		d.rt.Shutdown(context.Background())
		return fmt.Errorf("bgp: %w", err)
	}
	d.mu.Lock()
	d.bgp = a
	d.mu.Unlock()
	return nil
}

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
// time until a stop; it returns the exit code.
func (d *daemon) loop(cfg *config.Config) int {
	for {
		r := d.next()
		switch {
		case r.stop != nil:
			d.refuse(r)
			return d.stop(cfg, r.stop)
		case r.upgrade:
			var binary string
			var timeout time.Duration
			if r.up != nil {
				binary, timeout = r.up.binary, r.up.timeout
			}
			res, next := d.upgrade(cfg, binary, timeout)
			if r.up != nil {
				r.up.reply <- res
			}
			if res.OK {
				return d.exitAfterUpgrade(cfg, next)
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
func (d *daemon) stop(cfg *config.Config, sig os.Signal) int {
	close(d.stopping)
	d.tellManager(d.notify.stopping())
	d.log.Info("shutting down", zap.Stringer("signal", sig), zap.Duration("drain_timeout", cfg.Global.DrainTimeout))
	// Routers first: withdraw every VIP and give them shutdown_grace
	// to move new flows to the other balancers, then drain.
	d.bgp.withdraw()
	d.shutdown(cfg.Global.DrainTimeout, nil, 1)
	d.bgp.close()
	return 0
}

// exitAfterUpgrade stops this process once a new one took over: its
// listeners are the new one's now, and the connections it kept drain for
// up to drain_timeout. The service manager follows the new process
// already: no STOPPING=1. Stops and reloads asked of this process
// meanwhile (also during the upgrade) are the service's: they go to the
// new one.
func (d *daemon) exitAfterUpgrade(cfg *config.Config, next *successor) int {
	close(d.stopping)
	stops := d.passPending(next) // those that came during the upgrade
	d.log.Info("old process exiting after the upgrade", zap.Duration("drain_timeout", cfg.Global.DrainTimeout))
	// The new process runs its own speaker: this one's sessions close
	// now (without a withdraw: the new process announces the same
	// routes as soon as its session is up).
	d.bgp.close()
	d.shutdown(cfg.Global.DrainTimeout, next, stops)
	next.close()
	return 0
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
func (d *daemon) SetOverride(vip, backend string, o l4.Override, by string) (plane.OverrideResult, error) {
	return d.rt.SetOverride(vip, backend, o, by)
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

// tellManager logs a failed service-manager notification: l4lb keeps
// serving either way.
func (d *daemon) tellManager(err error) {
	if err != nil {
		d.log.Warn("service manager notification failed", zap.Error(err))
	}
}

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
	cfg, warnings, err = loadChecked(d.path)
	if err == nil {
		if problems := config.CheckReload(running, cfg); len(problems) > 0 {
			err = &config.Error{Problems: problems}
		}
	}
	if err != nil {
		d.log.Error("reload refused: config invalid, running config kept", zap.Error(err))
		return nil, nil, nil, err
	}
	d.logWarnings(warnings)
	restart = config.RestartOnly(running, cfg)
	cfg = config.InForce(running, cfg)
	if err := d.rt.Apply(cfg); err != nil {
		d.log.Error("reload failed, running config kept", zap.Error(err))
		return nil, nil, nil, err
	}
	if err := d.bgpNow().reconfigure(cfg.BGP); err != nil {
		d.log.Error("reload: bgp settings not fully applied", zap.Error(err))
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

// status is the runtime's status with the process's own facts.
func (d *daemon) status() plane.Status {
	st := d.rt.Status()
	d.mu.Lock()
	last := d.lastReload
	d.mu.Unlock()
	st.BGP = d.bgpNow().status()
	st.Process = plane.ProcessStatus{
		Version: d.build.Version, Commit: d.build.Commit, GoVersion: d.build.GoVersion, BuildDate: d.build.BuildDate,
		PID: os.Getpid(), Started: d.started, UptimeSeconds: time.Since(d.started).Seconds(), LastReload: last,
		Capabilities: d.capabilityStatus(),
	}
	return st
}

// eventLoops returns how many event loops to run (workers, or one per
// CPU the process may use) and makes room for them in the Go scheduler:
// each loop keeps a P (a Go scheduler slot) nearly all the time, so the
// process gets one more for everything else (health checks, the admin
// API, reloads). Without it a loop blocked in epoll_wait has its P taken
// away as soon as any other goroutine wants to run, and the runtime's
// monitor thread polls at its fastest rate to do so.
func eventLoops(workers int) int {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if runtime.GOMAXPROCS(0) < workers+1 {
		runtime.GOMAXPROCS(workers + 1)
	}
	return workers
}

// shutdown drains for up to drain; another SIGTERM/SIGINT cuts it short.
// stops is how many this process got already; next is the process an
// upgrade handed over to, if any (see duringDrain).
func (d *daemon) shutdown(drain time.Duration, next *successor, stops int) {
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
func (d *daemon) duringDrain(cut context.CancelFunc, next *successor, stops int, done <-chan struct{}) {
	s := d.sigs
	for {
		select {
		case <-done:
			d.passPending(next)
			return
		case sig := <-s.stop:
			next.pass(opStop, sig)
			if stops++; stops == 2 {
				d.log.Warn("second signal: resetting remaining connections", zap.Stringer("signal", sig))
				cut()
			}
		case sig := <-s.passed: // this process is stopping already
			next.pass(opStop, sig)
		case sig := <-s.reload:
			if next == nil {
				d.log.Info("signal ignored during shutdown", zap.Stringer("signal", sig))
			}
			next.pass(opReload, sig)
		case sig := <-s.upgrade:
			d.log.Info("signal ignored during shutdown", zap.Stringer("signal", sig))
		}
	}
}

// passPending passes the stops and reloads waiting now on to next (none
// without one); it returns how many stops this process got among them.
func (d *daemon) passPending(next *successor) int {
	if next == nil {
		return 0
	}
	stops := 0
	for {
		select {
		case sig := <-d.sigs.stop:
			next.pass(opStop, sig)
			stops++
		case sig := <-d.sigs.passed:
			next.pass(opStop, sig)
		case sig := <-d.sigs.reload:
			next.pass(opReload, sig)
		default:
			return stops
		}
	}
}

func (d *daemon) stopServers() {
	if d.admin != nil {
		d.admin.Close()
	}
	if d.metrics != nil {
		_ = d.metrics.Close()
	}
}

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit: every
// proxied connection needs two descriptors.
// It returns the limit in force either way.
func raiseFileLimit() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1024, err
	}
	cur := lim.Cur
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return cur, err
	}
	return lim.Cur, nil
}
