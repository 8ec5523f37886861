// probeloop_test.go: tcp checks on the probe loop: refused, silent, many targets, delayed RTT, no goroutine or allocation per probe.

package health

import (
	"container/heap"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// onLoop fails unless m runs its tcp checks on the probe loop.
func onLoop(t *testing.T, m *Manager) {
	t.Helper()
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.loop == nil {
		t.Fatal("tcp checks are not on the probe loop")
	}
}

// results returns key's active results so far.
func (r *recorder) results(key TargetKey) []Result {
	var out []Result
	for _, e := range r.snapshot(key) {
		if !e.Passive {
			out = append(out, e.Result)
		}
	}
	return out
}

// waitResults waits until key has n active results and returns them.
func (r *recorder) waitResults(t *testing.T, key TargetKey, n int, within time.Duration) []Result {
	t.Helper()
	testutil.Eventually(t, within, fmt.Sprintf("%s: %d results", key, n), func() bool { return len(r.results(key)) >= n })
	return r.results(key)
}

// TestLoopPoliteClose: a loop probe of a server that speaks first passes
// with the kernel's RTT, sends nothing, and ends every connection with a
// FIN (the greeting read and discarded), as the goroutine path does.
func TestLoopPoliteClose(t *testing.T) {
	t.Parallel()
	s := startServer(t, []byte("hello from a server that speaks first\r\n"), false)
	m, rec := newManager(t)
	key := TargetKey{"vip", "greeter"}
	spec := Spec{Type: l4.CheckTCP, Interval: 50 * time.Millisecond, Timeout: 50 * time.Millisecond}
	if err := m.Set(key, s.addr(), spec); err != nil {
		t.Fatal(err)
	}
	onLoop(t, m)
	rs := rec.waitResults(t, key, 3, 10*time.Second)
	m.Remove(key)
	ok := 0
	for _, r := range rs {
		if !r.OK {
			continue // a loaded machine may time one out; the closes below still count
		}
		ok++
		if !r.KernelRTT || r.Connect <= 0 || r.Took < r.Connect || r.FirstByte != 0 {
			t.Errorf("result %+v: want a kernel connect time, no first byte", r)
		}
	}
	if ok == 0 {
		t.Fatalf("no probe passed: %+v", rs)
	}
	for i, k := range s.waitCloses(t, len(rs)) {
		if k != closedFIN {
			t.Errorf("connection %d ended with %s, want fin", i, k)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range s.got {
		if len(b) != 0 {
			t.Errorf("connection %d: the probe sent %q, want nothing", i, b)
		}
	}
}

// TestLoopRefused: a closed port takes the target down at the first
// probe, with the goroutine path's reason and no connect time.
func TestLoopRefused(t *testing.T) {
	t.Parallel()
	m, rec := newManager(t)
	key := TargetKey{"vip", "closed"}
	if err := m.Set(key, closedPort(t), fast); err != nil {
		t.Fatal(err)
	}
	onLoop(t, m)
	down := rec.waitState(t, key, l4.HealthDown, 5*time.Second)
	if down.Reason != "connect refused" || down.Result.Connect != 0 || down.RTT != 0 {
		t.Fatalf("down event %+v", down)
	}
}

// TestLoopProxyHeader: with a PROXY header the loop probe writes it (the
// probe's own addresses first) and nothing else.
func TestLoopProxyHeader(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    l4.ProxyVersion
		want string
	}{{l4.ProxyV1, "PROXY TCP4 127.0.0.1 127.0.0.1 "}, {l4.ProxyV2, "\r\n\r\n\x00\r\nQUIT\n\x21\x11"}} {
		s := startServer(t, nil, false)
		m, rec := newManager(t)
		key := TargetKey{"vip", "pp"}
		spec := Spec{Type: l4.CheckTCP, Interval: time.Second, Timeout: time.Second, ProxyHeader: c.v}
		_ = m.Set(key, s.addr(), spec)
		onLoop(t, m)
		rec.waitState(t, key, l4.HealthUp, 10*time.Second)
		m.Remove(key)
		s.waitCloses(t, 1)
		s.mu.Lock()
		got := string(s.got[0])
		s.mu.Unlock()
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("v%d: the probe sent %q, want a header starting %q", c.v, got, c.want)
		}
	}
}

// TestLoopSilentHost: SYNs to a blackholed address (see blackhole) time
// the probe out at its timeout, not before.
func TestLoopSilentHost(t *testing.T) {
	a, addr := blackhole(t)
	rec := &recorder{}
	m := NewManager(rec.report)
	m.loopEnter = a.Enter
	t.Cleanup(m.Close)
	const timeout = 300 * time.Millisecond
	key := TargetKey{"vip", "silent"}
	if err := m.Set(key, addr, Spec{Type: l4.CheckTCP, Interval: time.Second, Timeout: timeout}); err != nil {
		t.Fatal(err)
	}
	onLoop(t, m)
	down := rec.waitState(t, key, l4.HealthDown, 5*time.Second)
	if down.Reason != "timeout after 300ms connecting" {
		t.Fatalf("reason %q", down.Reason)
	}
	// Never early; late only by the loaded machine's scheduling.
	if took := down.Result.Took; took < timeout || took > timeout+time.Second {
		t.Errorf("took %v, want %v plus a little", took, timeout)
	}
}

// TestLoopGoroutines: 200 targets, each its own listener, probed at once
// by one loop: every target comes up, the process runs one goroutine
// more than before (the loop) whatever the number of targets, and none
// after Close.
func TestLoopGoroutines(t *testing.T) {
	const n = 200
	addrs := make([]netip.AddrPort, n)
	for i := range addrs {
		l := listen(t)
		addrs[i] = addrOf(l)
		go func() { // accepts and closes: one parked goroutine per listener, no more
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
	}
	base := settledGoroutines()
	m, rec := newManager(t)
	spec := Spec{Type: l4.CheckTCP, Interval: 500 * time.Millisecond, Timeout: 500 * time.Millisecond}
	keys := make([]TargetKey, n)
	for i := range keys {
		keys[i] = TargetKey{"vip", l4.BackendID(fmt.Sprint(i))}
		if err := m.Set(keys[i], addrs[i], spec); err != nil {
			t.Fatal(err)
		}
	}
	onLoop(t, m)
	maxG := 0
	testutil.Eventually(t, 30*time.Second, "every target up after 3 checks", func() bool {
		maxG = max(maxG, runtime.NumGoroutine())
		for _, k := range keys {
			if st, _ := m.State(k); st.Health != l4.HealthUp || st.Checks < 3 {
				return false
			}
		}
		return true
	})
	if maxG > base+1 {
		t.Errorf("%d goroutines while probing %d targets, want at most %d (one loop)", maxG, n, base+1)
	}
	for _, k := range keys[:n/2] {
		m.Remove(k)
	}
	if got := len(rec.results(keys[0])); got == 0 {
		t.Fatal("no results")
	}
	m.Close()
	waitGoroutines(t, base)
}

// TestLoopJitter: the loop plans starts as the goroutine loops do:
// spread over the first interval, then ±10% every cycle.
func TestLoopJitter(t *testing.T) {
	t.Parallel()
	l := listen(t)
	testutil.ServeConns(l, func(c net.Conn) { _, _ = c.Read(make([]byte, 1)) })
	m, _ := newManager(t)
	checkJitter(t, m, addrOf(l))
}

// TestLoopRTTDelayed: behind a path that holds the balancer's packets to
// backend 1 for 20 ms, the loop's connect times (from TCP_INFO) show the
// delay on backend 1 and not on backend 0.
func TestLoopRTTDelayed(t *testing.T) {
	const delay = 20 * time.Millisecond
	dn := testutil.NewDelayNet(t, []time.Duration{0, delay})
	var keys []TargetKey
	m, rec := newManager(t)
	m.loopEnter = dn.LB.Enter
	for i, be := range dn.Backends {
		addr := netip.AddrPortFrom(dn.BackendIP(i), 7000)
		be.MustDo(t, func() error {
			l, err := net.Listen("tcp", addr.String())
			if err != nil {
				return err
			}
			t.Cleanup(func() { _ = l.Close() })
			testutil.ServeConns(l, func(c net.Conn) { _, _ = c.Read(make([]byte, 1)) })
			return nil
		})
		keys = append(keys, TargetKey{"vip", l4.BackendID(fmt.Sprint(i))})
		if err := m.Set(keys[i], addr, Spec{Type: l4.CheckTCP, Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	onLoop(t, m)
	var medians [2]time.Duration
	for i, k := range keys {
		var rtts []time.Duration
		testutil.Eventually(t, 20*time.Second, fmt.Sprintf("%s: 7 kernel RTT samples", k), func() bool {
			rtts = rtts[:0]
			for _, e := range rec.snapshot(k) {
				if e.RTT > 0 && e.Result.KernelRTT {
					rtts = append(rtts, e.RTT)
				}
			}
			return len(rtts) >= 7
		})
		slices.Sort(rtts)
		medians[i] = rtts[len(rtts)/2]
	}
	t.Logf("median connect: backend 0 %v, backend 1 (delayed %v) %v", medians[0], delay, medians[1])
	if medians[1] < delay || medians[1]-medians[0] < delay/2 {
		t.Fatalf("median connect times %v: backend 1 should be about %v slower", medians, delay)
	}
}

// TestLoopProbeAllocs: one whole probe on the loop (socket, connect,
// TCP_INFO, FIN, the server's FIN, close, the result reported and the
// next start planned) allocates nothing. The test drives the loop's
// turns itself and plays the server with raw syscalls, so that only the
// probe's own allocations count.
func TestLoopProbeAllocs(t *testing.T) {
	// A blocking descriptor of a loopback listener: its accepts, raw
	// syscalls, allocate nothing.
	ln := listen(t)
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lf.Close() })
	lfd, addr := lf.Fd(), addrOf(ln)
	m := NewManager(nil)
	t.Cleanup(m.Close)
	l, err := makeProbeLoop(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.release)
	tg := &target{key: TargetKey{"vip", "allocs"}}
	spec := Spec{Type: l4.CheckTCP, Interval: time.Hour, Timeout: 10 * time.Second}.withDefaults()
	m.reconfigure(tg, addr, spec, false)
	p, _ := newLoopProbe(tg, addr, spec)
	p.at = time.Now().Add(time.Hour)
	heap.Push(&l.heap, p)
	probe := func() {
		l.start(p, time.Now())
		for p.state == probeConnecting {
			l.turn(100)
		}
		srv, _, e := unix.Syscall6(unix.SYS_ACCEPT4, lfd, 0, 0, unix.SOCK_CLOEXEC, 0, 0)
		if e != 0 {
			panic(e)
		}
		unix.Close(int(srv)) // the server's FIN
		for p.state == probeClosing {
			l.turn(100)
		}
	}
	probe() // the map and scratch slices reach their size
	allocs := testing.AllocsPerRun(20, probe)
	st := tg.status(time.Now())
	if st.Health != l4.HealthUp || !st.Last.OK || !st.Last.KernelRTT || st.Checks < 20 {
		t.Fatalf("probes did not pass: %+v", st)
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per probe, want 0", allocs)
	}
}
