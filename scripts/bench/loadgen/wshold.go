package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/l4lb/l4lb/internal/testutil/wsecho"
)

// wsHoldConfig is one WebSocket hold: n connections, each sending a
// size-byte text message every interval for hold and checking its echo.
type wsHoldConfig struct {
	addr     string
	n, par   int
	size     int
	interval time.Duration
	hold     time.Duration
	timeout  time.Duration
	lbPid    int
}

// wsResult is what one connection's loop measured.
type wsResult struct {
	lat  []time.Duration
	errs *errorCounter
	dead bool // its connection failed (it is not reopened)
}

// runWSHold: open n WebSockets (testserver -ws behind the balancer, or
// directly), then every connection sends a message every -interval for
// -hold and checks the echo; the balancer's RSS is read during the hold
// (the higher of two samples, mid-hold and at its end) and its CPU time
// over the hold, per echoed message.
func runWSHold(args []string) (record, error) {
	var c common
	fs := newFlags("wshold", &c)
	n := fs.Int("n", 5000, "WebSocket connections")
	hold := fs.Duration("hold", 10*time.Second, "how long the connections exchange messages")
	interval := fs.Duration("interval", time.Second, "each connection sends a message this often")
	size := fs.Int("size", 32, "message payload in bytes (< 126)")
	pidfile := fs.String("pidfile", "", "file with the balancer's PID (or -lbpid; neither: direct, no balancer figures)")
	par := fs.Int("p", 64, "parallel connects")
	timeout := fs.Duration("timeout", 5*time.Second, "limit for a connect+upgrade and for an echo")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	if *size < 8 || *size > 125 || *n < 1 || *interval <= 0 {
		return nil, fmt.Errorf("need 8 <= -size <= 125, -n >= 1, -interval > 0")
	}
	if err := readPidfile(*pidfile, &c.lbPid); err != nil {
		return nil, err
	}
	limit, err := raiseNofile()
	if err != nil {
		return nil, err
	}
	if uint64(*n)+100 > limit {
		return nil, fmt.Errorf("-n %d needs more descriptors than RLIMIT_NOFILE %d", *n, limit)
	}
	watchdog(*hold + 4**timeout + time.Duration(*n/max(*par, 1))*3*time.Second + 30*time.Second)
	cfg := wsHoldConfig{addr: c.addr, n: *n, par: max(*par, 1), size: *size, interval: *interval,
		hold: *hold, timeout: *timeout, lbPid: c.lbPid}
	rec := c.labels("wshold")
	if err := wsHold(cfg, rec); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "wshold %s n=%d: %d opened, %d alive after %v, %.0f msg/s, p99 %.0f µs, LB RSS %v MiB, LB CPU %v µs/msg\n",
		c.addr, *n, rec["opened"], rec["alive"], *hold, rec["msg_per_s"], rec["p99_us"], rec["rss_mib"], rec["lb_cpu_us_per_msg"])
	return rec, nil
}

// wsHold runs the phases and fills rec.
func wsHold(cfg wsHoldConfig, rec record) error {
	var rssBefore int64
	if cfg.lbPid > 0 {
		var err error
		if rssBefore, err = rssKiB(cfg.lbPid); err != nil {
			return err
		}
	}
	errs := newErrorCounter()
	t0 := time.Now()
	conns := dialAll(cfg.n, cfg.par, errs, func() (*wsecho.Conn, error) { return wsecho.Dial(cfg.addr, cfg.timeout) })
	opened := 0
	for _, c := range conns {
		if c != nil {
			opened++
		}
	}
	openSecs := time.Since(t0).Seconds()
	start := time.Now()
	cpu := startCPU(cfg.lbPid)
	rssMid := make(chan int64, 1)
	rssNow := func() int64 {
		if cfg.lbPid <= 0 {
			return 0
		}
		v, _ := rssKiB(cfg.lbPid)
		return v
	}
	time.AfterFunc(cfg.hold/2, func() { rssMid <- rssNow() })
	results := wsLoops(conns, cfg, start)
	rss := max(rssNow(), <-rssMid)
	var lat []time.Duration
	alive := 0
	for _, r := range results {
		lat = append(lat, r.lat...)
		errs.merge(r.errs)
		if !r.dead {
			alive++
		}
	}
	rec["n"], rec["opened"], rec["alive"], rec["hold_s"], rec["open_s"] = cfg.n, opened, alive, cfg.hold.Seconds(), round3(openSecs)
	rec["msgs"], rec["msg_per_s"] = len(lat), round3(float64(len(lat))/cfg.hold.Seconds())
	rec["interval_s"], rec["size"] = cfg.interval.Seconds(), cfg.size
	putLatency(rec, "", lat, time.Microsecond)
	cpuRec := record{}
	cpu.put(cpuRec)
	putCPU(rec, cpuRec, "lb_cpu_us_per_msg", len(lat))
	if cfg.lbPid > 0 {
		rec["rss_before_kib"], rec["rss_kib"], rec["rss_mib"] = rssBefore, rss, round3(float64(rss)/1024)
		if opened > 0 {
			rec["rss_per_conn_kib"] = round3(float64(rss-rssBefore) / float64(opened))
		}
	}
	errs.put(rec)
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	return nil
}

// wsLoops runs every open connection's message loop, their first sends
// spread evenly over one interval from start, until start+hold.
func wsLoops(conns []*wsecho.Conn, cfg wsHoldConfig, start time.Time) []wsResult {
	results := make([]wsResult, len(conns))
	end := start.Add(cfg.hold)
	var wg sync.WaitGroup
	for i, c := range conns {
		results[i].errs = newErrorCounter()
		if c == nil {
			results[i].dead = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := start.Add(cfg.interval * time.Duration(i) / time.Duration(len(conns)))
			results[i] = wsLoop(c, cfg, i, first, end)
		}()
	}
	wg.Wait()
	return results
}

// wsLoop sends on one connection until end; it stops at its first error.
func wsLoop(c *wsecho.Conn, cfg wsHoldConfig, id int, next, end time.Time) wsResult {
	r := wsResult{errs: newErrorCounter()}
	msg := make([]byte, cfg.size)
	for i := range msg {
		msg[i] = 'w'
	}
	for seq := 0; ; seq++ {
		time.Sleep(time.Until(next))
		if !next.Before(end) {
			return r
		}
		next = next.Add(cfg.interval)
		copy(msg, fmt.Sprintf("%d:%d:", id, seq))
		t0 := time.Now()
		if err := c.Echo(msg, t0.Add(cfg.timeout)); err != nil {
			kind := "echo"
			if isTimeout(err) {
				kind = "timeout"
			}
			r.errs.add(kind, err)
			r.dead = true
			return r
		}
		r.lat = append(r.lat, time.Since(t0))
	}
}

// probeWS: one upgrade and one echoed message.
func probeWS(addr string) error {
	c, err := wsecho.Dial(addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Echo([]byte("probe"), time.Now().Add(time.Second))
}
