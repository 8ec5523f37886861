package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// holdConfig is one idle-connections run.
type holdConfig struct {
	addr     string
	n, par   int
	timeout  time.Duration
	msg      []byte
	lbPid    int
	holdTime time.Duration
}

// runHold: open n connections to a TCP echo service, exchange one message
// on each so the balancer's backend leg exists, hold them idle, read the
// balancer's RSS and descriptors, then check each connection still echoes.
func runHold(args []string) (record, error) {
	var c common
	fs := newFlags("hold", &c)
	n := fs.Int("n", 5000, "connections")
	holdTime := fs.Duration("hold", 10*time.Second, "how long the connections stay idle")
	pidfile := fs.String("pidfile", "", "file with the balancer's PID (or -lbpid)")
	par := fs.Int("p", 64, "parallel connects")
	timeout := fs.Duration("timeout", 5*time.Second, "limit for each phase's replies")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	if err := readPidfile(*pidfile, &c.lbPid); err != nil {
		return nil, err
	}
	if c.lbPid <= 0 {
		return nil, fmt.Errorf("need -pidfile or -lbpid")
	}
	limit, err := raiseNofile()
	if err != nil {
		return nil, err
	}
	if uint64(*n)+100 > limit {
		return nil, fmt.Errorf("-n %d needs more descriptors than RLIMIT_NOFILE %d", *n, limit)
	}
	watchdog(*holdTime + 4**timeout + time.Duration(*n/max(*par, 1))*3*time.Second + 30*time.Second)
	cfg := holdConfig{addr: c.addr, n: *n, par: max(*par, 1), timeout: *timeout,
		msg: bytes.Repeat([]byte{'h'}, 64), lbPid: c.lbPid, holdTime: *holdTime}
	rec := c.labels("hold")
	if err := hold(cfg, rec); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "hold %s n=%d: %d opened, %d alive after %v, LB RSS %.1f MiB (%.1f KiB/conn), %d LB fds\n",
		c.addr, *n, rec["opened"], rec["alive"], *holdTime, rec["rss_mib"], rec["rss_per_conn_kib"], rec["lb_fds"])
	return rec, nil
}

// hold runs the phases and fills rec.
func hold(cfg holdConfig, rec record) error {
	rssBefore, err := rssKiB(cfg.lbPid)
	if err != nil {
		return err
	}
	fdsBefore, _ := openFDs(cfg.lbPid)
	errs := newErrorCounter()
	t0 := time.Now()
	conns := dialAll(cfg.n, cfg.par, errs, func() (net.Conn, error) { return net.DialTimeout("tcp", cfg.addr, cfg.timeout) })
	opened := exchangeAll(conns, cfg, errs, "open")
	openSecs := time.Since(t0).Seconds()
	time.Sleep(cfg.holdTime)
	rss, err := rssKiB(cfg.lbPid)
	if err != nil {
		return err
	}
	fds, _ := openFDs(cfg.lbPid)
	alive := exchangeAll(conns, cfg, errs, "after_hold")
	for _, conn := range conns {
		if conn != nil {
			conn.Close()
		}
	}
	rec["n"], rec["opened"], rec["alive"], rec["hold_s"] = cfg.n, opened, alive, cfg.holdTime.Seconds()
	rec["open_s"] = round3(openSecs)
	rec["rss_before_kib"], rec["rss_kib"], rec["rss_mib"] = rssBefore, rss, round3(float64(rss)/1024)
	rec["lb_fds_before"], rec["lb_fds"] = fdsBefore, fds
	if opened > 0 {
		rec["rss_per_conn_kib"] = round3(float64(rss-rssBefore) / float64(opened))
		rec["lb_fds_per_conn"] = round3(float64(fds-fdsBefore) / float64(opened))
	}
	errs.put(rec)
	return nil
}

// dialAll runs dial n times with par workers; failed slots stay the
// zero T (nil) and count as connect errors.
func dialAll[T any](n, par int, errs *errorCounter, dial func() (T, error)) []T {
	conns := make([]T, n)
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				conn, err := dial()
				if err != nil {
					mu.Lock()
					errs.add("connect", err)
					mu.Unlock()
					continue
				}
				conns[i] = conn
			}
		}()
	}
	wg.Wait()
	return conns
}

// exchangeAll sends one message on every open connection at once and waits
// for all echoes under one deadline, so that connections a balancer never
// serves cost one timeout in total, not one each. Connections that fail
// are closed and set to nil. It returns how many echoed.
func exchangeAll(conns []net.Conn, cfg holdConfig, errs *errorCounter, phase string) int {
	deadline := time.Now().Add(cfg.timeout)
	var ok atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, conn := range conns {
		if conn == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply := make([]byte, len(cfg.msg))
			kind, err := echoUntil(conn, cfg.msg, reply, deadline)
			if err != nil {
				mu.Lock()
				errs.add(phase+"_"+kind, err)
				mu.Unlock()
				conn.Close()
				conns[i] = nil
				return
			}
			ok.Add(1)
		}()
	}
	wg.Wait()
	return int(ok.Load())
}

// echoUntil is echoOnce with an absolute deadline.
func echoUntil(conn net.Conn, msg, reply []byte, deadline time.Time) (string, error) {
	return echoOnce(conn, msg, reply, time.Until(deadline))
}

// readPidfile sets *pid from path when path is given.
func readPidfile(path string, pid *int) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("pidfile %s: %w", path, err)
	}
	*pid = v
	return nil
}

// raiseNofile lifts the soft RLIMIT_NOFILE to the hard limit and returns it.
func raiseNofile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return rl.Cur, nil
}
