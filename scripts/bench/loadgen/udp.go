package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// udpFlow is one client socket (one 5-tuple) with a bounded number of
// datagrams in flight.
type udpFlow struct {
	conn    *net.UDPConn
	w       window
	timeout time.Duration
	tokens  chan struct{} // one per datagram allowed in flight

	mu          sync.Mutex
	outstanding map[uint64]time.Time // seq -> send time
	lat         []time.Duration
	sent, lost  int // datagrams sent inside the window, and those never answered in time
	stray       int // replies that matched nothing in flight (late or unknown)
	errs        *errorCounter
}

// runUDP: request/response over UDP echo, flows sockets with inflight
// datagrams each; a datagram without a reply within -timeout is lost.
func runUDP(args []string) (record, error) {
	var c common
	fs := newFlags("udp", &c)
	flows := fs.Int("flows", 4, "client sockets (flows)")
	inflight := fs.Int("inflight", 8, "datagrams in flight per flow")
	size := fs.Int("size", 64, "datagram size in bytes (>= 8)")
	dur := fs.Duration("d", 8*time.Second, "measured duration")
	warm := fs.Duration("warmup", time.Second, "warm-up before measuring")
	timeout := fs.Duration("timeout", 200*time.Millisecond, "a datagram unanswered this long is lost")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	if *size < 8 || *flows < 1 || *inflight < 1 {
		return nil, fmt.Errorf("need -size >= 8, -flows >= 1, -inflight >= 1")
	}
	watchdog(*warm + *dur + 2**timeout + 10*time.Second)
	t0 := time.Now()
	w := window{t0.Add(*warm), t0.Add(*warm + *dur)}
	cpu := cpuWindow(c.lbPid, w)
	all, err := runFlows(c.addr, *flows, *inflight, *size, w, *timeout)
	if err != nil {
		return nil, err
	}
	rec := c.labels("udp")
	rec["flows"], rec["inflight"], rec["size"], rec["secs"] = *flows, *inflight, *size, dur.Seconds()
	rec["sent"], rec["received"], rec["lost"], rec["stray"] = all.sent, len(all.lat), all.lost, all.stray
	rec["req_per_s"] = round3(float64(len(all.lat)) / dur.Seconds())
	rec["loss_pct"] = 0.0
	if all.sent > 0 {
		rec["loss_pct"] = round3(100 * float64(all.lost) / float64(all.sent))
	}
	putLatency(rec, "", all.lat, time.Microsecond)
	all.errs.put(rec)
	putCPU(rec, <-cpu, "lb_cpu_us_per_req", len(all.lat))
	fmt.Fprintf(os.Stderr, "udp %s %dx%d: %.0f req/s, loss %.2f%%, p50 %.0f µs, p99 %.0f µs, %d errors\n",
		c.addr, *flows, *inflight, rec["req_per_s"], rec["loss_pct"], rec["p50_us"], rec["p99_us"], all.errs.total())
	return rec, nil
}

// runFlows runs every flow to the end of w and merges their results.
func runFlows(addr string, flows, inflight, size int, w window, timeout time.Duration) (*udpFlow, error) {
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	all := &udpFlow{errs: newErrorCounter()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range flows {
		conn, err := net.DialUDP("udp", nil, raddr)
		if err != nil {
			return nil, err
		}
		f := &udpFlow{conn: conn, w: w, timeout: timeout, tokens: make(chan struct{}, inflight),
			outstanding: map[uint64]time.Time{}, errs: newErrorCounter()}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.run(uint32(i), size)
			mu.Lock()
			all.lat = append(all.lat, f.lat...)
			all.sent, all.lost, all.stray = all.sent+f.sent, all.lost+f.lost, all.stray+f.stray
			all.errs.merge(f.errs)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all, nil
}

// run sends until the window ends, then waits one timeout for the last
// replies and counts what is still in flight as lost.
func (f *udpFlow) run(id uint32, size int) {
	defer f.conn.Close()
	for range cap(f.tokens) {
		f.tokens <- struct{}{}
	}
	done := make(chan struct{})
	go f.receive(done)
	stopSweep := f.sweep()
	f.send(id, size)
	time.Sleep(f.timeout)
	stopSweep()
	f.conn.SetReadDeadline(time.Now()) // ends receive
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, at := range f.outstanding {
		if f.w.holds(at, at) {
			f.lost++
		}
	}
}

// send writes a datagram whenever a token is free, until the window ends.
func (f *udpFlow) send(id uint32, size int) {
	buf := make([]byte, size)
	binary.BigEndian.PutUint32(buf[8:], id)
	end := time.NewTimer(time.Until(f.w.to))
	defer end.Stop()
	for seq := uint64(1); ; seq++ {
		select {
		case <-f.tokens:
		case <-end.C:
			return
		}
		now := time.Now()
		if now.After(f.w.to) {
			return
		}
		binary.BigEndian.PutUint64(buf, seq)
		f.mu.Lock()
		f.outstanding[seq] = now
		if f.w.holds(now, now) {
			f.sent++
		}
		f.mu.Unlock()
		if _, err := f.conn.Write(buf); err != nil && f.w.holds(now, now) {
			f.mu.Lock()
			f.errs.add("write", err) // the datagram stays outstanding and will count as lost
			f.mu.Unlock()
		}
	}
}

// receive matches replies to datagrams in flight until its deadline.
func (f *udpFlow) receive(done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 65536)
	for {
		n, err := f.conn.Read(buf)
		now := time.Now()
		if err != nil {
			if !isTimeout(err) && now.Before(f.w.to) {
				f.mu.Lock()
				f.errs.add("read", err) // e.g. ECONNREFUSED from an ICMP error
				f.mu.Unlock()
				continue
			}
			return
		}
		if n < 8 {
			f.mu.Lock()
			f.stray++
			f.mu.Unlock()
			continue
		}
		f.complete(binary.BigEndian.Uint64(buf), now)
	}
}

// complete records the reply to seq, if it is still in flight.
func (f *udpFlow) complete(seq uint64, now time.Time) {
	f.mu.Lock()
	at, ok := f.outstanding[seq]
	if !ok {
		f.stray++
		f.mu.Unlock()
		return
	}
	delete(f.outstanding, seq)
	if f.w.holds(at, at) {
		f.lat = append(f.lat, now.Sub(at))
	}
	f.mu.Unlock()
	f.release()
}

// sweep expires datagrams older than the timeout every few milliseconds,
// freeing their tokens; the returned func stops it.
func (f *udpFlow) sweep() func() {
	t := time.NewTicker(f.timeout / 10)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				f.expire(now)
			}
		}
	}()
	return func() { t.Stop(); close(stop) }
}

func (f *udpFlow) expire(now time.Time) {
	f.mu.Lock()
	var freed int
	for seq, at := range f.outstanding {
		if now.Sub(at) > f.timeout {
			delete(f.outstanding, seq)
			freed++
			if f.w.holds(at, at) {
				f.lost++
			}
		}
	}
	f.mu.Unlock()
	for range freed {
		f.release()
	}
}

func (f *udpFlow) release() {
	select {
	case f.tokens <- struct{}{}:
	default:
	}
}
