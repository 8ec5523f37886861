// cost_test.go: what probing 1000 backends costs the prober, loop against goroutines (L4LB_MEASURE=1 only).

package health

import (
	"bufio"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

const costTargets = 1000

// peakSampleEvery is how often the measurement samples the prober's open
// sockets (a readdir and a readlink per descriptor of /proc/self/fd, all
// charged to the prober): every 20 ms it was most of the measured CPU
// of a loop that held its 1000 sockets open.
const peakSampleEvery = 500 * time.Millisecond

// TestCostServer is the listener process of TestProbeCost: 1000 listeners
// on 127.0.0.1 that read each connection to EOF and close. It runs only
// when TestProbeCost starts it, so the prober's CPU is measured alone.
func TestCostServer(t *testing.T) {
	if os.Getenv("L4LB_COST_SERVER") != "1" {
		t.Skip("helper process of TestProbeCost")
	}
	var ports []string
	for range costTargets {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, strconv.Itoa(int(addrOf(l).Port())))
		testutil.ServeConns(l, func(c net.Conn) {
			_, _ = c.Read(make([]byte, 64)) // EOF: the prober sends nothing
		})
	}
	fmt.Println("PORTS " + strings.Join(ports, ","))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent is done
}

// TestProbeCost probes 1000 targets at a 1 s interval and reports the
// prober's CPU share, peak sockets and goroutines, and the TIME_WAIT
// sockets left: tcp checks on the probe loop and on a goroutine per
// target (the path before the loop), in L4LB_MEASURE_ROUNDS interleaved
// rounds (default 3) of L4LB_MEASURE_FOR each (default 10 s), then redis
// PING. Figures go to docs/bench-health.md by hand.
func TestProbeCost(t *testing.T) {
	if os.Getenv("L4LB_MEASURE") != "1" {
		t.Skip("set L4LB_MEASURE=1 to measure probe cost (about 100 s)")
	}
	measure, rounds := 10*time.Second, 3
	if d, err := time.ParseDuration(os.Getenv("L4LB_MEASURE_FOR")); err == nil {
		measure = d
	}
	if n, err := strconv.Atoi(os.Getenv("L4LB_MEASURE_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	tcpAddrs, serverPID := startCostServer(t)
	tcp := Spec{Type: l4.CheckTCP, Interval: time.Second, Timeout: time.Second}
	t.Run("tcp, 1000 listeners, loop and goroutines interleaved", func(t *testing.T) {
		addr := func(i int) netip.AddrPort { return tcpAddrs[i] }
		per := map[bool][]float64{} // by goroutines
		for r := range rounds {
			for _, goroutines := range []bool{r%2 == 1, r%2 == 0} { // alternate which goes first
				name := map[bool]string{false: "loop", true: "goroutines"}[goroutines]
				if only := os.Getenv("L4LB_MEASURE_PATH"); only != "" && only != name {
					continue // one path alone, for a profile
				}
				per[goroutines] = append(per[goroutines], runCost(t, name, tcp, addr, measure, serverPID, goroutines))
			}
		}
		loop, old := median(per[false]), median(per[true])
		t.Logf("median CPU per tcp check over %d rounds: loop %.1f µs, goroutines %.1f µs: %.2fx", rounds, loop, old, loop/old)
	})
	redis := testutil.StartRedis(t, "127.0.0.1:0", "")
	t.Run("redis PING, 1000 targets on one redis-server", func(t *testing.T) {
		runCost(t, "redis", Spec{Type: l4.CheckRedis, Interval: time.Second, Timeout: time.Second},
			func(int) netip.AddrPort { return redis.Addr }, measure, serverPID, false)
	})
}

// median is the middle value of xs (the mean of the two middle ones).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// runCost runs one measurement, logs its figures and returns the CPU per
// check in µs. goroutines runs tcp checks on a goroutine per target.
func runCost(t *testing.T, name string, spec Spec, addr func(int) netip.AddrPort, measure time.Duration, serverPID int, goroutines bool) float64 {
	var checks, fails atomic.Int64
	var mu sync.Mutex
	reasons := map[string]int{}
	m := NewManager(func(e Event) {
		if e.Passive {
			return
		}
		checks.Add(1)
		if !e.Result.OK {
			fails.Add(1)
			mu.Lock()
			reasons[e.Result.Reason]++
			mu.Unlock()
		}
	})
	m.tcpGoroutines = goroutines
	defer m.Close()
	for i := range costTargets {
		if err := m.Set(TargetKey{"cost", l4.BackendID(strconv.Itoa(i))}, addr(i), spec); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // past the spread-out first interval
	u0, s0 := cpuTime(t, "self")
	su0, ss0 := cpuTime(t, strconv.Itoa(serverPID))
	wall0, checks0 := time.Now(), checks.Load()
	peakFDs, peakG := 0, 0
	for time.Since(wall0) < measure {
		peakFDs, peakG = max(peakFDs, socketFDs(t)), max(peakG, runtime.NumGoroutine())
		time.Sleep(peakSampleEvery)
	}
	u1, s1 := cpuTime(t, "self")
	su1, ss1 := cpuTime(t, strconv.Itoa(serverPID))
	user, sys, wall := u1-u0, s1-s0, time.Since(wall0)
	cpu := user + sys
	n := checks.Load() - checks0
	ports := map[uint16]bool{}
	for i := range costTargets {
		ports[addr(i).Port()] = true
	}
	tw := proberTimeWaits(t, ports)
	perCheck := float64(cpu.Microseconds()) / float64(n)
	t.Logf("%s: %d checks in %v (%.0f/s), %d failed; prober CPU %v (user %v, sys %v) = %.1f%% of one core, "+
		"%.0f µs per check; peak %d open sockets, %d goroutines; %d prober-side TIME_WAIT; "+
		"listener process CPU %v; load avg %s",
		name, n, wall.Round(time.Millisecond), float64(n)/wall.Seconds(), fails.Load(), cpu, user, sys,
		100*cpu.Seconds()/wall.Seconds(), perCheck, peakFDs, peakG, tw,
		su1+ss1-su0-ss0, loadAvg())
	mu.Lock()
	defer mu.Unlock()
	for r, n := range reasons {
		t.Logf("failed %d times: %s", n, r)
	}
	return perCheck
}

// proberTimeWaits counts TIME_WAIT sockets whose remote port is in ports.
func proberTimeWaits(t *testing.T, ports map[uint16]bool) int {
	n := 0
	for _, line := range strings.Split(procNetTCP(t), "\n") {
		fs := strings.Fields(line)
		if len(fs) > 3 && fs[3] == "06" && ports[hexPort(fs[2])] {
			n++
		}
	}
	return n
}

// startCostServer starts the listener process and returns its addresses
// and PID.
func startCostServer(t *testing.T) ([]netip.AddrPort, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCostServer$")
	cmd.Env = append(os.Environ(), "L4LB_COST_SERVER=1")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if ports, ok := strings.CutPrefix(sc.Text(), "PORTS "); ok {
			var addrs []netip.AddrPort
			for _, p := range strings.Split(ports, ",") {
				n, _ := strconv.Atoi(p)
				addrs = append(addrs, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(n)))
			}
			go func() { _, _ = bufio.NewReader(out).ReadString(0) }() // keep draining
			return addrs, cmd.Process.Pid
		}
	}
	t.Fatal("cost server gave no ports")
	return nil, 0
}

// cpuTime is a process's user and system time from /proc/PID/stat.
func cpuTime(t *testing.T, pid string) (user, sys time.Duration) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the ")" that ends the command name: utime and stime are
	// the 12th and 13th, in clock ticks (100 per second on Linux).
	fs := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(fs[11], 10, 64)
	st, _ := strconv.ParseInt(fs[12], 10, 64)
	return time.Duration(ut) * 10 * time.Millisecond, time.Duration(st) * 10 * time.Millisecond
}

// socketFDs counts the process's open sockets.
func socketFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// loadAvg returns the 1-minute load average.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
