// manager_test.go: the Manager's loops, transitions, passive marks, jitter and goroutine hygiene.

package health

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) report(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// snapshot returns the events of key so far (all keys when key is zero).
func (r *recorder) snapshot(key TargetKey) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.events {
		if key == (TargetKey{}) || e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

// transitions returns key's state changes as "old>new" strings.
func (r *recorder) transitions(key TargetKey) []string {
	var out []string
	for _, e := range r.snapshot(key) {
		if e.Changed() {
			out = append(out, e.Old.String()+">"+e.New.String())
		}
	}
	return out
}

// waitState waits until key's events reach state h by a transition.
func (r *recorder) waitState(t *testing.T, key TargetKey, h l4.Health, within time.Duration) Event {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		evs := r.snapshot(key)
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Changed() {
				if evs[i].New == h {
					return evs[i]
				}
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s did not become %v within %v; transitions %v", key, h, within, r.transitions(key))
	return Event{}
}

func newManager(t *testing.T) (*Manager, *recorder) {
	t.Helper()
	rec := &recorder{}
	m := NewManager(rec.report)
	t.Cleanup(m.Close)
	return m, rec
}

var fast = Spec{Type: l4.CheckTCP, Interval: 40 * time.Millisecond, Timeout: 30 * time.Millisecond, Rise: 2, Fall: 2}

// scripted is a checker whose verdict the test sets: the Manager's logic
// is tested without depending on a loaded machine's timing.
type scripted struct {
	ok    atomic.Bool
	calls atomic.Int64
}

func (c *scripted) Check(ctx context.Context, _ netip.AddrPort) Result {
	c.calls.Add(1)
	r := Result{Start: time.Now(), OK: c.ok.Load(), Connect: time.Millisecond, KernelRTT: true}
	if !r.OK {
		r.Reason, r.Connect = "scripted failure", 0
	}
	return r
}

// newScripted returns a manager whose checks all go to one scripted checker.
func newScripted(t *testing.T, ok bool) (*Manager, *recorder, *scripted) {
	t.Helper()
	m, rec := newManager(t)
	sc := &scripted{}
	sc.ok.Store(ok)
	m.checkerFor = func(Spec) (Checker, error) { return sc, nil }
	return m, rec, sc
}

var anyAddr = netip.MustParseAddrPort("198.18.0.1:5432") // never dialled by scripted checks

func TestManagerTransitionsOnce(t *testing.T) {
	t.Parallel()
	// Below the ephemeral range, so that no outgoing connection can take
	// the port while the server is away.
	l := testutil.ListenLoopback(t)
	addr := addrOf(l)
	m, rec := newManager(t)
	key := TargetKey{"vip", "b1"}
	// Real sockets: timeouts generous enough for a loaded machine.
	spec := Spec{Type: l4.CheckTCP, Interval: 150 * time.Millisecond, Timeout: 150 * time.Millisecond, Rise: 2, Fall: 2}
	if err := m.Set(key, addr, spec); err != nil {
		t.Fatal(err)
	}
	if first := rec.waitState(t, key, l4.HealthUp, 2*time.Second); !strings.HasPrefix(first.Reason, "first check passed (connect ") {
		t.Errorf("first up event's reason %q", first.Reason)
	}
	_ = l.Close()
	down := rec.waitState(t, key, l4.HealthDown, 2*time.Second)
	if down.Reason != "connect refused" || down.Passive {
		t.Errorf("down event %+v", down)
	}
	time.Sleep(4 * spec.Interval) // more failures must not repeat the transition
	l2, err := net.Listen("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if up := rec.waitState(t, key, l4.HealthUp, 2*time.Second); !strings.HasPrefix(up.Reason, "2 checks passed in a row (connect ") {
		t.Errorf("up again event's reason %q", up.Reason)
	}
	m.Remove(key)

	if got := fmt.Sprint(rec.transitions(key)); got != "[unknown>up up>down down>up]" {
		t.Fatalf("transitions %s", got)
	}
	evs := rec.snapshot(key)
	for _, e := range evs {
		if e.Result.OK != (e.RTT > 0) || (e.RTT > 0 && e.RTT != e.Result.Connect) {
			t.Fatalf("event RTT %v for result ok=%v connect=%v", e.RTT, e.Result.OK, e.Result.Connect)
		}
	}
	if len(evs) < 6 { // at least 1 + 2 + 2 checks made the transitions, plus the failures slept through
		t.Fatalf("only %d events: every check must be reported", len(evs))
	}
	st, ok := m.State(key)
	if ok || st.Checks != 0 {
		t.Fatal("removed key still has a state")
	}
}

func TestManagerPassive(t *testing.T) {
	t.Parallel()
	m, rec, sc := newScripted(t, true)
	key := TargetKey{"vip", "b1"}
	spec := fast
	spec.MaxFails, spec.FailTimeout = 2, 10*time.Second
	if err := m.Set(key, anyAddr, spec); err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, key, l4.HealthUp, 2*time.Second)
	m.PassiveFailure(key)
	if st, _ := m.State(key); st.Health != l4.HealthUp || st.PassiveFails != 1 {
		t.Fatalf("one of two passive failures: %+v", st)
	}
	marked := time.Now()
	m.PassiveFailure(key)
	st, _ := m.State(key)
	if st.Health != l4.HealthDown || !st.PassiveDown || st.Reason != "passive: 2 failed connects within 10s" {
		t.Fatalf("after max_fails: %+v", st)
	}
	up := rec.waitState(t, key, l4.HealthUp, 2*time.Second)
	if !up.Result.Start.After(marked) {
		t.Fatal("came back on a probe that started before the mark")
	}
	okAfter := 0
	for _, e := range rec.snapshot(key) {
		if !e.Passive && e.Result.Start.After(marked) && e.Result.OK {
			okAfter++
		}
	}
	if okAfter < spec.Rise {
		t.Fatalf("up after %d good probes, want rise=%d", okAfter, spec.Rise)
	}
	// Passive failures while active checks fail add nothing to the run.
	sc.ok.Store(false)
	rec.waitState(t, key, l4.HealthDown, 2*time.Second)
	if got := fmt.Sprint(rec.transitions(key)); got != "[unknown>up up>down down>up up>down]" {
		t.Fatalf("transitions %s", got)
	}
	if !m.PassiveFailure(key) || m.PassiveFailure(TargetKey{"vip", "nope"}) {
		t.Fatal("PassiveFailure must report whether the key is tracked")
	}
}

func TestManagerTypeNone(t *testing.T) {
	t.Parallel()
	m, rec := newManager(t)
	key := TargetKey{"vip", "b1"}
	spec := Spec{Type: l4.CheckNone, MaxFails: 1, FailTimeout: 150 * time.Millisecond}
	if err := m.Set(key, netip.MustParseAddrPort("198.18.0.1:1"), spec); err != nil {
		t.Fatal(err)
	}
	m.PassiveSuccess(key, 3*time.Millisecond)
	m.PassiveFailure(key)
	down := rec.waitState(t, key, l4.HealthDown, time.Second)
	// The mark expires into a trial: eligible, but not called up.
	trial := rec.waitState(t, key, l4.HealthUnknown, time.Second)
	if st, _ := m.State(key); !st.Trial || !down.Passive || !trial.Passive || trial.Reason != "passive mark expired: on trial" {
		t.Fatalf("state %+v, events %+v %+v", st, down, trial)
	}
	// Still dead: one more failure takes it down at once (max_fails 1
	// here, but the trial needs no count either way).
	m.PassiveFailure(key)
	if again := rec.waitState(t, key, l4.HealthDown, time.Second); again.Reason != "passive: failed again while on trial" {
		t.Fatalf("failure on trial: %+v", again)
	}
	rec.waitState(t, key, l4.HealthUnknown, time.Second)
	m.PassiveSuccess(key, 0)
	if up := rec.waitState(t, key, l4.HealthUp, time.Second); up.Reason != "passive success while on trial" {
		t.Fatalf("success on trial: %+v", up)
	}
	if st, _ := m.State(key); st.Trial {
		t.Fatal("still on trial after a success")
	}
	evs := rec.snapshot(key)
	if evs[0].RTT != 3*time.Millisecond || evs[0].Changed() {
		t.Fatalf("passive success event %+v", evs[0])
	}
	if st, _ := m.State(key); st.Checks != 0 {
		t.Fatal("type none ran active checks")
	}
}

func TestManagerUpdate(t *testing.T) {
	t.Parallel()
	a, b := anyAddr, netip.MustParseAddrPort("198.18.0.2:5432")
	m, rec, _ := newScripted(t, true)
	key := TargetKey{"vip", "b1"}
	if err := m.Set(key, a, fast); err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, key, l4.HealthUp, 2*time.Second)
	if err := m.Set(key, a, fast); err != nil { // unchanged: no restart, no event
		t.Fatal(err)
	}
	slower := fast
	slower.Timeout = 35 * time.Millisecond
	if err := m.Set(key, a, slower); err != nil { // same type and addr: state kept
		t.Fatal(err)
	}
	if st, _ := m.State(key); st.Health != l4.HealthUp {
		t.Fatalf("spec change lost the state: %v", st.Health)
	}
	if err := m.Set(key, b, slower); err != nil { // new address: starts over
		t.Fatal(err)
	}
	rec.waitState(t, key, l4.HealthUp, 2*time.Second)
	if got := fmt.Sprint(rec.transitions(key)); got != "[unknown>up up>unknown unknown>up]" {
		t.Fatalf("transitions %s; events %+v", got, rec.snapshot(key))
	}
	if st, _ := m.State(key); st.Addr != b {
		t.Fatalf("probing %v, want %v", st.Addr, b)
	}
	if err := m.Set(key, b, Spec{Type: l4.CheckType(99)}); err == nil {
		t.Fatal("bad spec accepted")
	}
	m.Close()
	if err := m.Set(key, b, fast); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close: %v", err)
	}
}

// TestManagerRemoveStopsEvents: nothing is reported for a key after Remove.
func TestManagerRemoveStopsEvents(t *testing.T) {
	t.Parallel()
	m, rec, _ := newScripted(t, true)
	key := TargetKey{"vip", "b1"}
	_ = m.Set(key, anyAddr, fast)
	rec.waitState(t, key, l4.HealthUp, 2*time.Second)
	m.Remove(key)
	n := len(rec.snapshot(key))
	m.PassiveFailure(key)
	time.Sleep(4 * fast.Interval)
	if got := len(rec.snapshot(key)); got != n {
		t.Fatalf("%d events after Remove", got-n)
	}
}

func TestManagerFirstByteMetric(t *testing.T) {
	t.Parallel()
	addr := addrOf(startEcho(t))
	m, rec := newManager(t)
	key := TargetKey{"vip", "echo"}
	spec := fast
	spec.Type, spec.Send, spec.Expect, spec.Metric = l4.CheckSendExpect, []byte("x\n"), []byte("ECHO x"), l4.MetricFirstByte
	_ = m.Set(key, addr, spec)
	rec.waitState(t, key, l4.HealthUp, 2*time.Second)
	for _, e := range rec.snapshot(key) {
		if e.RTT != e.Result.FirstByte || e.RTT <= 0 {
			t.Fatalf("RTT %v, first byte %v", e.RTT, e.Result.FirstByte)
		}
	}
}

// TestManagerGoroutines: every probe goroutine ends on Remove, on update
// and on Close.
func TestManagerGoroutines(t *testing.T) {
	s := startServer(t, nil, false)
	base := settledGoroutines()
	m := NewManager(nil)
	m.tcpGoroutines = true // a goroutine per target: what this test counts (TestLoopGoroutines: the probe loop)
	const n = 50
	keys := make([]TargetKey, n)
	for i := range keys {
		keys[i] = TargetKey{"vip", l4.BackendID(fmt.Sprint(i))}
		if err := m.Set(keys[i], s.addr(), fast); err != nil {
			t.Fatal(err)
		}
	}
	if g := runtime.NumGoroutine(); g < base+n-2 { // leftovers of earlier tests may still end
		t.Fatalf("%d goroutines, want about %d", g, base+n)
	}
	time.Sleep(3 * fast.Interval)
	slower := fast
	slower.Interval = 50 * time.Millisecond
	for i := range n / 2 {
		m.Remove(keys[i])
		_ = m.Set(keys[n/2+i], s.addr(), slower) // restarts the loop
	}
	waitGoroutines(t, base+n/2)
	m.Close()
	waitGoroutines(t, base)
}

// settledGoroutines waits briefly for goroutines of earlier tests to end
// and returns the count.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(10 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// waitGoroutines waits until at most want goroutines run (server-side
// handlers of the last probes end a moment after the probes).
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, want <= %d\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestManagerJitter: first probes are planned uniformly over the first
// interval after Set; later cycles vary by ±10% and never realign. It
// reads the planned starts (what the loop asks its timer for), so that a
// loaded machine's late timers do not blur the schedule under test.
func TestManagerJitter(t *testing.T) {
	t.Parallel()
	m, _, _ := newScripted(t, true)
	checkJitter(t, m, anyAddr)
}

// checkJitter sets 60 targets at addr on m and checks their planned starts.
func checkJitter(t *testing.T, m *Manager, addr netip.AddrPort) {
	t.Helper()
	type plan struct {
		at   time.Time
		late bool
	}
	var mu sync.Mutex
	plans := map[TargetKey][]plan{}
	m.planned = func(k TargetKey, at time.Time, late bool) {
		mu.Lock()
		plans[k] = append(plans[k], plan{at, late})
		mu.Unlock()
	}
	const n = 60
	interval := 200 * time.Millisecond
	spec := Spec{Type: l4.CheckTCP, Interval: interval, Timeout: interval}
	setAt := map[TargetKey]time.Time{}
	for i := range n {
		k := TargetKey{"vip", l4.BackendID(fmt.Sprint(i))}
		setAt[k] = time.Now()
		_ = m.Set(k, addr, spec)
	}
	time.Sleep(6 * interval)
	m.Close()
	var buckets [4]int
	var gaps []float64
	late := 0
	for k, ps := range plans {
		off := ps[0].at.Sub(setAt[k])
		if off < 0 || off > interval+20*time.Millisecond {
			t.Fatalf("%s first probe planned at +%v, want within the first interval", k, off)
		}
		buckets[min(int(off*4/interval), 3)]++
		for i := 1; i < len(ps); i++ {
			if ps[i].late {
				late++
				continue
			}
			gaps = append(gaps, float64(ps[i].at.Sub(ps[i-1].at))/float64(interval))
		}
	}
	for i, c := range buckets {
		if c < 5 { // expected 15 each; P(< 5) is about 1e-4
			t.Fatalf("first probes per quarter interval %v: quarter %d nearly empty", buckets, i)
		}
	}
	t.Logf("%d cycles on time, %d late (the machine stalled the loop)", len(gaps), late)
	checkGaps(t, gaps)
}

// checkGaps asserts that on-time cycle lengths (in intervals) lie in
// 0.9..1.1 and spread like a uniform ±10% (sd 0.058). Late cycles are
// left out by the caller: a loop whose timer fired too late plans "now".
// Those skew what remains a little toward longer draws, hence the loose
// bound on the mean.
func checkGaps(t *testing.T, gaps []float64) {
	t.Helper()
	if len(gaps) < 60 {
		t.Fatalf("only %d on-time cycles", len(gaps))
	}
	var sum, sq float64
	for _, g := range gaps {
		if g < 0.9-1e-6 || g > 1.1+1e-6 {
			t.Fatalf("cycle of %.3f intervals", g)
		}
		sum += g
	}
	mean := sum / float64(len(gaps))
	for _, g := range gaps {
		sq += (g - mean) * (g - mean)
	}
	sd := math.Sqrt(sq / float64(len(gaps)))
	if math.Abs(mean-1) > 0.04 || sd < 0.04 || sd > 0.07 {
		t.Fatalf("cycles mean %.3f sd %.3f, want about 1 and 0.058", mean, sd)
	}
}
