package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// rrConfig is one request/response run on persistent connections.
type rrConfig struct {
	addr     string
	interval time.Duration // per connection; 0 = closed loop
	w        window
	size     int
	timeout  time.Duration
}

// rrResult is what one connection's worker measured inside the window.
type rrResult struct {
	lat  []time.Duration
	late int // sends that started more than one interval behind schedule
	errs *errorCounter
}

// runRR: c persistent connections to a TCP echo service, each sending
// size-byte messages and waiting for the echo. With -rate > 0 the sends
// follow an absolute schedule (open loop; the RTT is measured from the
// actual write, so timer slack is not counted); with -rate 0 each
// connection sends as soon as its echo is back (closed loop).
func runRR(args []string) (record, error) {
	var c common
	fs := newFlags("rr", &c)
	conc := fs.Int("c", 4, "persistent connections")
	rate := fs.Float64("rate", 2000, "requests/s in total, 0 = closed loop")
	dur := fs.Duration("d", 8*time.Second, "measured duration")
	warm := fs.Duration("warmup", time.Second, "warm-up before measuring")
	size := fs.Int("size", 64, "message size in bytes (>= 8)")
	timeout := fs.Duration("timeout", 2*time.Second, "limit for one reply")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	if *size < 8 || *conc < 1 || *rate < 0 {
		return nil, fmt.Errorf("need -size >= 8, -c >= 1, -rate >= 0")
	}
	watchdog(*warm + *dur + 4**timeout + 10*time.Second)
	cfg := rrConfig{addr: c.addr, size: *size, timeout: *timeout}
	if *rate > 0 {
		cfg.interval = time.Duration(float64(*conc) / *rate * float64(time.Second))
	}
	t0 := time.Now()
	cfg.w = window{t0.Add(*warm), t0.Add(*warm + *dur)}
	cpu := cpuWindow(c.lbPid, cfg.w)
	res := rrWorkers(cfg, *conc, t0)
	rec := c.labels("rr")
	rec["conc"], rec["rate"], rec["secs"], rec["size"] = *conc, *rate, dur.Seconds(), *size
	rec["reqs"], rec["req_per_s"] = len(res.lat), round3(float64(len(res.lat))/dur.Seconds())
	rec["late"] = res.late
	putLatency(rec, "", res.lat, time.Microsecond)
	res.errs.put(rec)
	putCPU(rec, <-cpu, "lb_cpu_us_per_req", len(res.lat))
	fmt.Fprintf(os.Stderr, "rr %s c=%d rate=%.0f: %.0f req/s, p50 %.0f µs, p99 %.0f µs, %d late, %d errors\n",
		c.addr, *conc, *rate, rec["req_per_s"], rec["p50_us"], rec["p99_us"], res.late, res.errs.total())
	return rec, nil
}

// rrWorkers runs one worker per connection, their schedules spread evenly
// over one interval, and merges their results.
func rrWorkers(cfg rrConfig, conc int, t0 time.Time) rrResult {
	total := rrResult{errs: newErrorCounter()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := t0.Add(cfg.interval * time.Duration(i) / time.Duration(conc))
			r := rrWorker(cfg, uint32(i), start)
			mu.Lock()
			total.lat = append(total.lat, r.lat...)
			total.late += r.late
			total.errs.merge(r.errs)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total
}

// rrWorker drives one connection until the window ends, reconnecting after
// an error.
func rrWorker(cfg rrConfig, id uint32, next time.Time) rrResult {
	r := rrResult{errs: newErrorCounter()}
	msg := bytes.Repeat([]byte{'m'}, cfg.size)
	binary.BigEndian.PutUint32(msg, id)
	reply := make([]byte, cfg.size)
	var conn net.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for seq := uint32(0); ; seq++ {
		if cfg.interval > 0 {
			time.Sleep(time.Until(next))
		}
		start := time.Now()
		if start.After(cfg.w.to) {
			return r
		}
		if cfg.interval > 0 && start.Sub(next) > cfg.interval && cfg.w.holds(start, start) {
			r.late++
		}
		next = next.Add(cfg.interval)
		if conn == nil {
			var err error
			if conn, err = net.DialTimeout("tcp", cfg.addr, cfg.timeout); err != nil {
				r.errs.add("connect", err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			start = time.Now()
		}
		binary.BigEndian.PutUint32(msg[4:], seq)
		kind, err := echoOnce(conn, msg, reply, cfg.timeout)
		end := time.Now()
		if err != nil {
			if !start.Before(cfg.w.from) {
				r.errs.add(kind, err)
			}
			conn.Close()
			conn = nil
			continue
		}
		if cfg.w.holds(start, end) {
			r.lat = append(r.lat, end.Sub(start))
		}
	}
}

// echoOnce writes msg and reads its echo into reply, within timeout.
func echoOnce(conn net.Conn, msg, reply []byte, timeout time.Duration) (string, error) {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "deadline", err
	}
	if _, err := conn.Write(msg); err != nil {
		return "write", err
	}
	if _, err := io.ReadFull(conn, reply); err != nil {
		if isTimeout(err) {
			return "timeout", err
		}
		return "read", err
	}
	if !bytes.Equal(msg, reply) {
		return "reply", fmt.Errorf("echo differs from the message")
	}
	return "", nil
}
