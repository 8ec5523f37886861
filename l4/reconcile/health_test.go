package reconcile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/l4lb/l4lb/health"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

const healthVIP = `
[global]
admin_socket = "off"

[[vip]]
name = "web"
listen = "%s"
retries = 2
connect_timeout = "500ms"
  [vip.health]
  type = "tcp"
  interval = "200ms"
  timeout = "100ms"
  rise = 2
  fall = 2
  max_fails = %d
  slow_start = "2s"
%s`

// TestBackendDownAndBack kills a backend's server: it is marked down by
// its first fall probes begun after the kill, it is picked for no client
// afterwards (its counters stand still) and no client sees an error
// meanwhile; restarted, it is up after its first rise probes and its
// weight ramps over slow_start. Detection is counted in probes, not in
// wall time: on a busy machine the probes' timers fire late, while the
// count (what rise and fall promise) does not change.
func TestBackendDownAndBack(t *testing.T) {
	for _, passive := range []int{0, 1} {
		t.Run(fmt.Sprintf("max_fails=%d", passive), func(t *testing.T) {
			testDownAndBack(t, passive)
		})
	}
}

func testDownAndBack(t *testing.T, maxFails int) {
	const rise, fall = 2, 2 // as healthVIP sets them
	servers := map[string]*namedServer{"a": startNamed(t, "a"), "b": startNamed(t, "b"), "c": startNamed(t, "c")}
	addrs := map[string]netip.AddrPort{}
	for n, s := range servers {
		addrs[n] = s.addr
	}
	vip := testutil.FreeTCPAddr(t)
	rt, probes := startProbedRuntime(t, fmt.Sprintf(healthVIP, vip, maxFails, backendsTOML(addrs)))
	for n := range servers {
		waitBackend(t, rt, "web", n, 10*time.Second, "up", func(b plane.BackendStatus) bool { return b.Health == "up" })
	}
	clients := startClients(vip)
	clients.waitDialSince(t, time.Now())

	killing := time.Now() // a passive mark may come before kill returns
	servers["b"].kill()
	killed := time.Now() // b refuses every connect begun from here on
	took := waitBackend(t, rt, "web", "b", 10*time.Second, "down", func(b plane.BackendStatus) bool { return b.Health == "down" })
	if n := probes.checksUntil("b", killing, killed, l4.HealthDown); n > fall {
		t.Errorf("marked down after %d probes begun after the kill, want at most fall = %d", n, fall)
	}
	t.Logf("detection: down after %v (fall x interval + timeout = 500ms on an idle machine)", took)
	// What the clients notice cannot tell: a connect to b's closed port is
	// refused and retried on another backend. b's counters can: every
	// pick of b is a flow or a failed connect. A client that picked b
	// before the snapshot without it was published has ended once a
	// dial begun after the mark has completed.
	clients.waitDialSince(t, time.Now())
	before := clients.snapshot()["b"]
	stBefore, _ := backendStatus(rt, "web", "b")
	time.Sleep(500 * time.Millisecond)
	if after := clients.snapshot()["b"]; after != before {
		t.Errorf("%d clients sent to b after it was marked down", after-before)
	}
	if stAfter, _ := backendStatus(rt, "web", "b"); stAfter.Flows != stBefore.Flows || stAfter.ConnectFails != stBefore.ConnectFails {
		t.Errorf("b picked after it was marked down: flows %d -> %d, connect fails %d -> %d",
			stBefore.Flows, stAfter.Flows, stBefore.ConnectFails, stAfter.ConnectFails)
	}

	servers["b"].restart(t)
	restarted := time.Now()
	took = waitBackend(t, rt, "web", "b", 10*time.Second, "up", func(b plane.BackendStatus) bool { return b.Health == "up" })
	if n := probes.checksUntil("b", restarted, restarted, l4.HealthUp); n > rise {
		t.Errorf("up after %d probes begun after the restart, want at most rise = %d", n, rise)
	}
	t.Logf("detection: up after %v (rise x interval = 400ms on an idle machine)", took)
	first, _ := backendStatus(rt, "web", "b")
	if first.EffectiveWeight >= first.Weight {
		t.Errorf("slow start: effective weight %d right after recovery, want below %d", first.EffectiveWeight, first.Weight)
	}
	last := first.EffectiveWeight
	waitBackend(t, rt, "web", "b", 10*time.Second, "full weight", func(b plane.BackendStatus) bool {
		if b.EffectiveWeight < last {
			t.Errorf("slow start went down: %d after %d", b.EffectiveWeight, last)
		}
		last = b.EffectiveWeight
		return b.EffectiveWeight == b.Weight
	})
	// Closing b's listener makes the kernel reset the connections in its
	// accept queue: a client l4lb had connected there a moment before
	// sees that reset (l4lb passes a backend's reset on once connected).
	// That is b's death, not l4lb's doing, and only a dial begun before
	// the kill can see it; any other error is a failure.
	errs := clients.finish()
	if late := clients.errorsSince(killed); len(late) > 0 || len(errs) > 2 {
		t.Fatalf("%d clients saw errors (%d begun after b's kill), first: %v", len(errs), len(late), errs[0])
	}
	if n := clients.snapshot()["b"]; n == before {
		t.Error("b got no clients after it came back")
	}
}

// probeLog records every health event of a Runtime, in the order each
// target reports them, with when it was reported.
type probeLog struct {
	mu     sync.Mutex
	events []health.Event
	at     []time.Time
}

// startProbedRuntime is startRuntime with the health events recorded.
func startProbedRuntime(t *testing.T, toml string) (*Runtime, *probeLog) {
	t.Helper()
	rt := New(zaptest.NewLogger(t), Options{})
	log := &probeLog{}
	rt.health.Close()
	rt.health = health.NewManager(func(ev health.Event) {
		log.mu.Lock()
		log.events, log.at = append(log.events, ev), append(log.at, time.Now())
		log.mu.Unlock()
		rt.onHealth(ev)
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
	})
	apply(t, rt, toml)
	return rt, log
}

// checksUntil counts backend's active checks begun at or after since up
// to its first transition to h reported after changedSince (MaxInt when
// none was). changedSince may come before since: a passive mark (a
// client's refused connect, max_fails = 1) can be reported before the
// test has read the clock after the kill that caused it.
func (p *probeLog) checksUntil(backend string, changedSince, since time.Time, h l4.Health) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i, ev := range p.events {
		if string(ev.Key.Backend) != backend || p.at[i].Before(changedSince) {
			continue
		}
		if !ev.Passive && !ev.Result.Start.Before(since) {
			n++
		}
		if ev.Changed() && ev.New == h {
			return n
		}
	}
	return math.MaxInt
}

// TestProbersStopOnReloadAndRemoval: removing backends by reload, and the
// VIP itself, stops their probes (Remove returns once the probe loop or
// the probe goroutine has dropped them) and leaks no goroutine. tcp
// checks run on one probe loop, so the targets are counted, not
// goroutines.
func TestProbersStopOnReloadAndRemoval(t *testing.T) {
	one := map[string]netip.AddrPort{"a": startNamed(t, "a").addr}
	many := map[string]netip.AddrPort{}
	for i := 0; i < 40; i++ { // nothing listens on these: refused
		many[fmt.Sprintf("dead%d", i)] = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(100+i))
	}
	many["a"] = one["a"]
	vip := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, fmt.Sprintf(healthVIP, vip, 1, backendsTOML(one)))
	time.Sleep(100 * time.Millisecond)
	baseline := runtime.NumGoroutine()

	apply(t, rt, fmt.Sprintf(healthVIP, vip, 1, backendsTOML(many)))
	if n := len(rt.health.Keys()); n != 41 {
		t.Fatalf("%d probed targets with 41 backends: probes not started?", n)
	}
	apply(t, rt, fmt.Sprintf(healthVIP, vip, 1, backendsTOML(one)))
	if n := len(rt.health.Keys()); n != 1 {
		t.Fatalf("%d probed targets after a reload to 1 backend", n)
	}
	waitGoroutines(t, baseline, "backends removed by reload")

	other := testutil.FreeTCPAddr(t)
	apply(t, rt, fmt.Sprintf(healthVIP, other, 1, backendsTOML(many)))
	apply(t, rt, fmt.Sprintf(healthVIP, vip, 1, backendsTOML(one)))
	if n := len(rt.health.Keys()); n != 1 {
		t.Fatalf("%d probed targets after the VIP's removal", n)
	}
	waitGoroutines(t, baseline, "VIP removed by reload")
}

func waitGoroutines(t *testing.T, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%s: %d goroutines, baseline %d\n%s", what, runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const onDownVIP = `
[global]
admin_socket = "off"
[[vip]]
name = "web"
listen = "%s"
  [vip.health]
  type = "tcp"
  interval = "200ms"
  timeout = "100ms"
  fall = 1
  on_down = "%s"
  [[vip.backend]]
  name = "a"
  address = "%s"
`

// TestOnDown: when a backend goes down (its listener closes; established
// connections at the server stay healthy), on_down = "keep" leaves a
// proxied connection working and on_down = "reset" resets it.
func TestOnDown(t *testing.T) {
	for _, mode := range []string{"keep", "reset"} {
		t.Run(mode, func(t *testing.T) {
			srv := startNamed(t, "a")
			vip := testutil.FreeTCPAddr(t)
			rt := startRuntime(t, fmt.Sprintf(onDownVIP, vip, mode, srv.addr))
			waitBackend(t, rt, "web", "a", 3*time.Second, "up", func(b plane.BackendStatus) bool { return b.Health == "up" })
			c, err := net.DialTimeout("tcp4", vip.String(), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := bufio.NewReader(c)
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			srv.kill()
			waitBackend(t, rt, "web", "a", 3*time.Second, "down", func(b plane.BackendStatus) bool { return b.Health == "down" })
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if mode == "reset" {
				// Read without writing first: a write after a plain FIN
				// would draw a reset from the closed socket too.
				if line, err := r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("on_down=reset: read %q, %v; want a reset (ECONNRESET)", line, err)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
			_, werr := c.Write([]byte("ping\n"))
			line, rerr := r.ReadString('\n')
			if werr != nil || rerr != nil || line != "ping\n" {
				t.Fatalf("on_down=keep: connection broken (write %v, read %q %v)", werr, line, rerr)
			}
		})
	}
}
