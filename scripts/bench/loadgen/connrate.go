package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// httpRequest is a 100-byte HTTP/1.0 GET with Connection: close, so that
// the backend answers and then closes.
var httpRequest = padRequest(100)

func padRequest(size int) []byte {
	head := "GET / HTTP/1.0\r\nHost: bench\r\nConnection: close\r\nX-Pad: "
	tail := "\r\n\r\n"
	return []byte(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
}

// window is the measured part of a run: warm-up excluded.
type window struct{ from, to time.Time }

func (w window) holds(start, end time.Time) bool { return !start.Before(w.from) && !end.After(w.to) }

// runConnRate: workers loop connect -> request -> read to EOF -> close.
func runConnRate(args []string) (record, error) {
	var c common
	fs := newFlags("connrate", &c)
	conc := fs.Int("c", 64, "concurrent workers")
	dur := fs.Duration("d", 8*time.Second, "measured duration")
	warm := fs.Duration("warmup", time.Second, "warm-up before measuring")
	timeout := fs.Duration("timeout", 5*time.Second, "limit for one connection, connect to EOF")
	hello := fs.String("hello", "", "send a TLS ClientHello with this server name to an echo server and read it back, instead of an HTTP GET (SNI routing's cost)")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	one := oneHTTPConn
	if *hello != "" {
		one = helloConn(clientHello(*hello))
	}
	watchdog(*warm + *dur + 2**timeout + 10*time.Second)
	t0 := time.Now()
	w := window{t0.Add(*warm), t0.Add(*warm + *dur)}
	cpu := cpuWindow(c.lbPid, w)
	lat, errs := connRateWorkers(c.addr, *conc, w, *timeout, one)
	rec := c.labels("connrate")
	rec["conc"], rec["secs"] = *conc, dur.Seconds()
	rec["conns"], rec["conn_per_s"] = len(lat), round3(float64(len(lat))/dur.Seconds())
	putLatency(rec, "", lat, time.Millisecond)
	errs.put(rec)
	putCPU(rec, <-cpu, "lb_cpu_us_per_conn", len(lat))
	fmt.Fprintf(os.Stderr, "connrate %s c=%d: %.0f conn/s, p50 %.2f ms, p99 %.2f ms, %d errors\n",
		c.addr, *conc, rec["conn_per_s"], rec["p50_ms"], rec["p99_ms"], errs.total())
	return rec, nil
}

// connRateWorkers runs conc workers until w ends and returns the spans
// that fall inside w and all errors.
func connRateWorkers(addr string, conc int, w window, timeout time.Duration, one connFunc) ([]time.Duration, *errorCounter) {
	var mu sync.Mutex
	var all []time.Duration
	errs := newErrorCounter()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat, e := connRateWorker(addr, w, timeout, one)
			mu.Lock()
			all = append(all, lat...)
			errs.merge(e)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all, errs
}

// connFunc makes one connection and its exchange; on error it returns the
// failing step's name.
type connFunc func(addr string, timeout time.Duration, buf []byte) (string, error)

func connRateWorker(addr string, w window, timeout time.Duration, one connFunc) ([]time.Duration, *errorCounter) {
	var lat []time.Duration
	errs := newErrorCounter()
	buf := make([]byte, 4096)
	for {
		start := time.Now()
		if start.After(w.to) {
			return lat, errs
		}
		kind, err := one(addr, timeout, buf)
		end := time.Now()
		switch {
		case err != nil:
			if !start.Before(w.from) { // warm-up errors are not counted
				errs.add(kind, err)
			}
			time.Sleep(10 * time.Millisecond) // no hot loop against a refusing address
		case w.holds(start, end):
			lat = append(lat, end.Sub(start))
		}
	}
}

// dialSend connects to addr, sets one deadline timeout from now for the
// whole exchange and sends msg. On error it returns the failing step's
// name and no connection.
func dialSend(addr string, timeout time.Duration, msg []byte) (net.Conn, string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, "connect", err
	}
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		conn.Close()
		return nil, "deadline", err
	}
	if _, err := conn.Write(msg); err != nil {
		conn.Close()
		return nil, "write", err
	}
	return conn, "", nil
}

// oneHTTPConn makes one connection, sends the request and reads the reply
// to EOF. It returns the failing step's name on error.
func oneHTTPConn(addr string, timeout time.Duration, buf []byte) (string, error) {
	conn, step, err := dialSend(addr, timeout, httpRequest)
	if err != nil {
		return step, err
	}
	defer conn.Close()
	n, err := io.ReadAtLeast(conn, buf, len("HTTP/1.x 200"))
	if err != nil {
		return "read", err
	}
	if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.")) {
		return "reply", fmt.Errorf("not an HTTP reply: %q", buf[:min(n, 40)])
	}
	if _, err := io.CopyBuffer(io.Discard, conn, buf); err != nil {
		return "read", err
	}
	return "", nil
}

// isTimeout reports whether err is a deadline or timeout error.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
