// Rebalance: real long-lived connections moved off the loaded backends at
// the configured rate, never reset; the plan's arithmetic by itself.

package reconcile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// heldClients are long-lived clients of a VIP: each reads until its
// connection ends; an orderly EOF makes it reconnect at once, anything
// else is recorded as an error (and it reconnects too).
type heldClients struct {
	addr netip.AddrPort
	wg   sync.WaitGroup
	// backoff is how long a client waits after its connection ended
	// before it reconnects (a pool's reconnect delay); 0 = at once. quit
	// cuts the wait short when the test ends.
	backoff time.Duration
	quit    chan struct{}

	mu         sync.Mutex
	stopping   bool
	conns      map[int]net.Conn
	on         map[int]string // client -> the backend it is connected to now
	eofs       int
	reconnects int
	errs       []error
}

// holdClients connects n clients one after the other (so that least_conn
// spreads them evenly) and keeps them connected.
func holdClients(t *testing.T, addr netip.AddrPort, n int) *heldClients {
	t.Helper()
	return holdClientsBackoff(t, addr, n, 0)
}

// holdClientsBackoff is holdClients whose clients wait backoff before
// they reconnect.
func holdClientsBackoff(t *testing.T, addr netip.AddrPort, n int, backoff time.Duration) *heldClients {
	t.Helper()
	h := &heldClients{addr: addr, backoff: backoff, quit: make(chan struct{}), conns: map[int]net.Conn{}, on: map[int]string{}}
	t.Cleanup(h.stop)
	for i := range n {
		c, r, name, err := h.dial()
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		h.mu.Lock()
		h.conns[i], h.on[i] = c, name
		h.mu.Unlock()
		h.wg.Add(1)
		go h.hold(i, c, r)
	}
	return h
}

// dial connects and reads the backend's name.
func (h *heldClients) dial() (net.Conn, *bufio.Reader, string, error) {
	c, err := net.DialTimeout("tcp4", h.addr.String(), 5*time.Second)
	if err != nil {
		return nil, nil, "", err
	}
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	name, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, nil, "", fmt.Errorf("reading the backend's name: %w", err)
	}
	c.SetReadDeadline(time.Time{})
	return c, r, strings.TrimSpace(name), nil
}

// hold reads until the connection ends, then reconnects, until stopped.
func (h *heldClients) hold(i int, c net.Conn, r *bufio.Reader) {
	defer h.wg.Done()
	for {
		_, err := r.ReadByte() // the backend sends nothing after its name
		c.Close()
		h.mu.Lock()
		if h.stopping {
			h.mu.Unlock()
			return
		}
		if err == io.EOF {
			h.eofs++
		} else {
			h.errs = append(h.errs, fmt.Errorf("client %d on %s: %w", i, h.on[i], err))
		}
		delete(h.on, i)
		h.mu.Unlock()
		select {
		case <-time.After(h.backoff):
		case <-h.quit:
			return
		}
		var name string
		c, r, name, err = h.dial()
		h.mu.Lock()
		if err != nil {
			h.errs = append(h.errs, fmt.Errorf("client %d reconnecting: %w", i, err))
			h.mu.Unlock()
			return
		}
		h.reconnects++
		h.conns[i], h.on[i] = c, name
		stopping := h.stopping
		h.mu.Unlock()
		if stopping {
			c.Close()
			return
		}
	}
}

func (h *heldClients) stop() {
	h.mu.Lock()
	if !h.stopping {
		close(h.quit)
	}
	h.stopping = true
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// spread counts the connected clients per backend.
func (h *heldClients) spread() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, name := range h.on {
		out[name]++
	}
	return out
}

func (h *heldClients) result() (eofs, reconnects int, errs []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.eofs, h.reconnects, append([]error(nil), h.errs...)
}

const rebalanceConf = `
[global]
admin_socket = "off"
[[vip]]
name = "a"
listen = "%s"
algorithm = "%s"
rebalance_rate = %d
  [vip.health]
  type = "none"
`

// rebalanceConfig is a VIP with the given backends and weights.
func rebalanceConfig(vipAddr netip.AddrPort, algorithm string, rate int, servers []*namedServer, weights ...int) string {
	s := fmt.Sprintf(rebalanceConf, vipAddr, algorithm, rate)
	for i, srv := range servers {
		s += fmt.Sprintf("  [[vip.backend]]\n  name = %q\n  address = %q\n  weight = %d\n", srv.name, srv.addr, weights[i])
	}
	return s
}

// liveOf returns the VIP's live flows per backend.
func liveOf(rt *Runtime) map[string]int64 {
	out := map[string]int64{}
	for _, b := range rt.Status().VIPs[0].Backends {
		out[b.ID] = b.LiveFlows
	}
	return out
}

// waitRebalance polls until the VIP's rebalance is no longer running.
func waitRebalance(t *testing.T, rt *Runtime, limit time.Duration) plane.RebalanceStatus {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st, err := rt.RebalanceStatus("a")
		if err != nil {
			t.Fatal(err)
		}
		if !st.Running() {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebalance still running after %v: %+v", limit, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRebalanceAfterBackendJoins is issue 11's test: 300 long-lived
// connections on two backends, a third joins, and a rebalance brings each
// within 10% of a third at the configured rate, with no connection reset.
func TestRebalanceAfterBackendJoins(t *testing.T) {
	const conns, rate = 300, 50
	servers := []*namedServer{startNamed(t, "s1"), startNamed(t, "s2"), startNamed(t, "s3")}
	vipAddr := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, rebalanceConfig(vipAddr, "least_conn", rate, servers[:2], 100, 100))
	clients := holdClients(t, vipAddr, conns)
	if live := liveOf(rt); live["s1"] != conns/2 || live["s2"] != conns/2 {
		t.Fatalf("before: %v", live)
	}

	apply(t, rt, rebalanceConfig(vipAddr, "least_conn", rate, servers, 100, 100, 100))
	time.Sleep(200 * time.Millisecond)
	if live := liveOf(rt); live["s3"] != 0 {
		t.Fatalf("established connections moved by themselves: %v", live)
	}
	start := time.Now()
	plan, err := rt.Rebalance("a", RebalanceOptions{By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// The plan: each old backend gives up 45, so that s3 reaches 90 (10%
	// under its 100) and s1, s2 stay 5% over.
	if plan.State != plane.RebalanceRunning || plan.Rate != rate || plan.Close != "fin" || plan.Planned != 90 {
		t.Fatalf("plan: %+v", plan)
	}
	for _, b := range plan.Backends {
		want := map[string]int{"s1": 45, "s2": 45, "s3": 0}[b.ID]
		if b.ToClose != want || b.Target != 100 || !b.Eligible {
			t.Fatalf("plan for %s: %+v, want %d to close and a target of 100", b.ID, b, want)
		}
	}
	if _, err := rt.Rebalance("a", RebalanceOptions{}); !errors.Is(err, ErrRebalanceRunning) {
		t.Fatalf("a second rebalance while one runs: %v", err)
	}

	st := waitRebalance(t, rt, 30*time.Second)
	took := time.Since(start)
	if st.State != plane.RebalanceDone || st.Closed < 85 || st.Closed > 100 {
		t.Fatalf("rebalance ended %+v", st)
	}
	// The rate: closes start one tick (100ms) in, 5 a tick.
	if least := time.Duration(float64(st.Closed-rate/10) / rate * float64(time.Second)); took < least || took > 3*least+2*time.Second {
		t.Fatalf("closing %d at %d/s took %v, want at least %v", st.Closed, rate, took, least)
	}
	t.Logf("closed %d in %v (%.1f/s): %+v", st.Closed, took, float64(st.Closed)/took.Seconds(), st.Backends)

	testutil.Eventually(t, 10*time.Second, "every client reconnected", func() bool {
		n := 0
		for _, k := range clients.spread() {
			n += k
		}
		return n == conns
	})
	for id, live := range liveOf(rt) {
		if math.Abs(float64(live)-conns/3) > conns/3*RebalanceTolerance {
			t.Fatalf("backend %s holds %d of %d connections, not within 10%% of a third: %v", id, live, conns, liveOf(rt))
		}
	}
	eofs, reconnects, errs := clients.result()
	if len(errs) > 0 {
		t.Fatalf("%d clients saw something other than an orderly EOF, the first: %v", len(errs), errs[0])
	}
	if eofs != st.Closed || reconnects != st.Closed {
		t.Fatalf("%d closed, %d clients saw EOF, %d reconnected", st.Closed, eofs, reconnects)
	}
	if spread := clients.spread(); spread["s3"] < 90 {
		t.Fatalf("clients' view: %v", spread)
	}
}

// TestRebalanceClosesWhatItPlanned is D7: 8 connections on two backends,
// a third joins, and the plan is 2 closes. The clients reconnect after a
// second and a half, as a pool with a reconnect delay does. The rebalance
// closes the 2 it planned and waits for them to land, rather than reading
// the falling live counts as more to close (it closed 5 and ended "every
// backend within 10%" with the new backend at 0); its report is then
// true: every backend within its slack of its share, the new one at 2.
func TestRebalanceClosesWhatItPlanned(t *testing.T) {
	const conns = 8
	servers := []*namedServer{startNamed(t, "s1"), startNamed(t, "s2"), startNamed(t, "s3")}
	vipAddr := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, rebalanceConfig(vipAddr, "least_conn", 10, servers[:2], 100, 100))
	clients := holdClientsBackoff(t, vipAddr, conns, 1500*time.Millisecond)
	apply(t, rt, rebalanceConfig(vipAddr, "least_conn", 10, servers, 100, 100, 100))
	plan, err := rt.Rebalance("a", RebalanceOptions{By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Planned != 2 {
		t.Fatalf("plan: %+v, want 2 closes", plan)
	}
	st := waitRebalance(t, rt, 20*time.Second)
	eofs, _, errs := clients.result()
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	if st.State != plane.RebalanceDone || st.Closed != 2 || st.Planned != 2 || eofs != 2 {
		t.Fatalf("rebalance ended %s after closing %d of %d planned (clients saw %d closes): %s; %+v", st.State, st.Closed, st.Planned, eofs, st.Reason, st.Backends)
	}
	for _, b := range st.Backends {
		if math.Abs(float64(b.Live)-b.Target) > math.Max(RebalanceTolerance*b.Target, 1) {
			t.Fatalf("reported %q, but %s holds %d for a target of %v: %+v", st.Reason, b.ID, b.Live, b.Target, st.Backends)
		}
	}
	if live := liveOf(rt); live["s3"] != 2 || live["s1"]+live["s2"] != 6 {
		t.Fatalf("after the rebalance: %v, want 2 on s3", live)
	}
}

// TestRebalanceStopsWhenClientsDoNotReturn: the same, but the closed
// clients do not come back (within the test). The rebalance closes its
// plan, waits for them, and stops saying so, instead of closing more
// clients that would not come back either.
func TestRebalanceStopsWhenClientsDoNotReturn(t *testing.T) {
	servers := []*namedServer{startNamed(t, "s1"), startNamed(t, "s2"), startNamed(t, "s3")}
	vipAddr := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, rebalanceConfig(vipAddr, "least_conn", 10, servers[:2], 100, 100))
	clients := holdClientsBackoff(t, vipAddr, 8, time.Hour)
	apply(t, rt, rebalanceConfig(vipAddr, "least_conn", 10, servers, 100, 100, 100))
	if _, err := rt.Rebalance("a", RebalanceOptions{}); err != nil {
		t.Fatal(err)
	}
	st := waitRebalance(t, rt, 20*time.Second)
	eofs, _, _ := clients.result()
	if st.State != plane.RebalanceStopped || st.Closed != 2 || eofs != 2 || !strings.Contains(st.Reason, "did not reconnect") {
		t.Fatalf("rebalance ended %s after closing %d of %d (clients saw %d): %s", st.State, st.Closed, st.Planned, eofs, st.Reason)
	}
}

// TestRebalanceFollowsWeights: targets are the weights' shares.
func TestRebalanceFollowsWeights(t *testing.T) {
	servers := []*namedServer{startNamed(t, "s1"), startNamed(t, "s2"), startNamed(t, "s3")}
	vipAddr := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, rebalanceConfig(vipAddr, "least_conn", 500, servers[:2], 100, 100))
	clients := holdClients(t, vipAddr, 120)
	apply(t, rt, rebalanceConfig(vipAddr, "least_conn", 500, servers, 100, 100, 200))
	plan, err := rt.Rebalance("a", RebalanceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b := plan.Backends[2]; b.ID != "s3" || b.Target != 60 || plan.Planned != 54 {
		t.Fatalf("plan: %+v", plan)
	}
	if st := waitRebalance(t, rt, 20*time.Second); st.State != plane.RebalanceDone {
		t.Fatalf("rebalance: %+v", st)
	}
	testutil.Eventually(t, 10*time.Second, "the clients to settle", func() bool {
		live := liveOf(rt)
		return live["s1"]+live["s2"]+live["s3"] == 120
	})
	live := liveOf(rt)
	for id, want := range map[string]float64{"s1": 30, "s2": 30, "s3": 60} {
		if math.Abs(float64(live[id])-want) > math.Max(want*RebalanceTolerance, 1) {
			t.Fatalf("%s holds %d, want %v within 10%%: %v", id, live[id], want, live)
		}
	}
	if _, _, errs := clients.result(); len(errs) > 0 {
		t.Fatal(errs[0])
	}
}

// TestRebalanceRoundRobin: round robin sends a reconnecting client by
// weight, not load, so only a third of the closed clients land on the new
// backend: the rebalance closes more than its plan, and gets there.
func TestRebalanceRoundRobin(t *testing.T) {
	servers := []*namedServer{startNamed(t, "s1"), startNamed(t, "s2"), startNamed(t, "s3")}
	vipAddr := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, rebalanceConfig(vipAddr, "round_robin", 1000, servers[:2], 100, 100))
	clients := holdClients(t, vipAddr, 150)
	apply(t, rt, rebalanceConfig(vipAddr, "round_robin", 1000, servers, 100, 100, 100))
	first, err := rt.Rebalance("a", RebalanceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := waitRebalance(t, rt, 20*time.Second)
	if st.State != plane.RebalanceDone || st.Rounds < 2 || st.Closed <= first.Planned || st.Closed > st.Planned {
		t.Fatalf("rebalance: %+v after a first plan of %d", st, first.Planned)
	}
	eofs, _, errs := clients.result()
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	if eofs != st.Closed {
		t.Fatalf("closed %d, clients saw %d closes", st.Closed, eofs)
	}
	t.Logf("first plan %d; %d rounds planned %d, closed %d", first.Planned, st.Rounds, st.Planned, st.Closed)
}

// TestRebalanceStopsWhenClientsComeBack: with source_hash every loopback
// client hashes to one backend (one client address), so a closed client
// comes straight back. The rebalance notices, says why and stops, having
// closed no more than it takes to notice.
func TestRebalanceStopsWhenClientsComeBack(t *testing.T) {
	servers := []*namedServer{startNamed(t, "s1"), startNamed(t, "s2")}
	vipAddr := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, rebalanceConfig(vipAddr, "source_hash", 50, servers, 100, 100))
	holdClients(t, vipAddr, 40)
	if _, err := rt.Rebalance("a", RebalanceOptions{}); err != nil {
		t.Fatal(err)
	}
	st := waitRebalance(t, rt, 20*time.Second)
	if st.State != plane.RebalanceStopped || !strings.Contains(st.Reason, "no progress") || !strings.Contains(st.Reason, "source_hash") {
		t.Fatalf("rebalance: %+v", st)
	}
	if st.Closed < rebalanceStallCloses || st.Closed > rebalanceStallCloses+5 {
		t.Fatalf("closed %d, want about %d: it must hold off once closes stop helping", st.Closed, rebalanceStallCloses)
	}
}

// TestRebalanceResetIsSeen: with Reset the clients see resets, which the
// helper above counts as errors (so TestRebalanceAfterBackendJoins would
// see them).
func TestRebalanceResetIsSeen(t *testing.T) {
	servers := []*namedServer{startNamed(t, "s1"), startNamed(t, "s2")}
	vipAddr := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, rebalanceConfig(vipAddr, "least_conn", 100, servers[:1], 100))
	clients := holdClients(t, vipAddr, 20)
	apply(t, rt, rebalanceConfig(vipAddr, "least_conn", 100, servers, 100, 100))
	st, err := rt.Rebalance("a", RebalanceOptions{Reset: true})
	if err != nil || st.Close != "reset" {
		t.Fatalf("%+v %v", st, err)
	}
	if st := waitRebalance(t, rt, 10*time.Second); st.State != plane.RebalanceDone {
		t.Fatalf("rebalance: %+v", st)
	}
	testutil.Eventually(t, 5*time.Second, "the reset clients to report", func() bool {
		_, _, errs := clients.result()
		return len(errs) >= 9
	})
	_, _, errs := clients.result()
	for _, err := range errs {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("client error %v, want a reset (ECONNRESET)", err)
		}
	}
}

// TestRebalanceRefusedAndStopped: what cannot be rebalanced says why; an
// operator, a reload that removes the VIP, and rebalance_rate = 0 stop a
// running rebalance.
func TestRebalanceRefusedAndStopped(t *testing.T) {
	servers := []*namedServer{startNamed(t, "s1"), startNamed(t, "s2")}
	vipAddr := testutil.FreeTCPAddr(t)
	conf := func(rate int, n int) string {
		return rebalanceConfig(vipAddr, "least_conn", rate, servers[:n], 100, 100)
	}
	rt := startRuntime(t, conf(1, 1))
	holdClients(t, vipAddr, 30)

	if _, err := rt.Rebalance("nosuch", RebalanceOptions{}); !errors.Is(err, ErrNoVIP) {
		t.Fatalf("unknown VIP: %v", err)
	}
	if st, err := rt.Rebalance("a", RebalanceOptions{}); err != nil || st.State != plane.RebalanceDone || !strings.Contains(st.Reason, "nothing to do") {
		t.Fatalf("one backend: %+v %v", st, err)
	}
	apply(t, rt, conf(0, 2))
	if _, err := rt.Rebalance("a", RebalanceOptions{Rate: 5}); !errors.Is(err, plane.ErrCannotRebalance) || !strings.Contains(err.Error(), "rebalance_rate is 0") {
		t.Fatalf("rebalance_rate 0: %v", err)
	}

	apply(t, rt, conf(1, 2))
	if _, err := rt.Rebalance("a", RebalanceOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := rt.StopRebalance("a", "alice")
	if err != nil || st.State != plane.RebalanceStopped || st.Reason != "stopped by alice" {
		t.Fatalf("stop: %+v %v", st, err)
	}
	if _, err := rt.Rebalance("a", RebalanceOptions{}); err != nil {
		t.Fatalf("a rebalance after a stopped one: %v", err)
	}
	apply(t, rt, conf(0, 2))
	if st := waitRebalance(t, rt, 5*time.Second); st.State != plane.RebalanceStopped || !strings.Contains(st.Reason, "rebalance_rate to 0") {
		t.Fatalf("after a reload set rebalance_rate = 0: %+v", st)
	}
	apply(t, rt, conf(1, 2))
	if _, err := rt.Rebalance("a", RebalanceOptions{}); err != nil {
		t.Fatal(err)
	}
	v := rt.vipNamed("a")
	apply(t, rt, fmt.Sprintf("[global]\nadmin_socket = \"off\"\n[[vip]]\nname = \"b\"\nlisten = %q\n  [[vip.backend]]\n  address = %q\n", testutil.FreeTCPAddr(t), servers[0].addr))
	if st := v.rebalanceStatus(); st.State != plane.RebalanceStopped || !strings.Contains(st.Reason, "removed") {
		t.Fatalf("after a reload removed the VIP: %+v", st)
	}
}

func TestRebalanceRefusesUDP(t *testing.T) {
	rt := startRuntime(t, fmt.Sprintf(`
[global]
admin_socket = "off"
[[vip]]
name = "a"
listen = %q
protocol = "udp"
  [[vip.backend]]
  address = "127.0.0.1:9"
`, testutil.FreeTCPAddr(t)))
	if _, err := rt.Rebalance("a", RebalanceOptions{}); !errors.Is(err, plane.ErrCannotRebalance) || !strings.Contains(err.Error(), "udp") {
		t.Fatalf("udp VIP: %v", err)
	}
	if st, err := rt.RebalanceStatus("a"); err != nil || st.State != plane.RebalanceNone || !strings.Contains(st.Reason, "udp VIPs are not rebalanced") {
		t.Fatalf("status of a udp VIP: %+v %v", st, err)
	}
}

// rows builds balance rows from (weight, live) pairs.
func rows(wl ...[2]int) []balanceRow {
	var out []balanceRow
	for i, x := range wl {
		out = append(out, balanceRow{b: l4.NewBackend(l4.BackendID(fmt.Sprint(i)), netip.AddrPort{}, nil), weight: uint32(x[0]), live: int64(x[1])})
	}
	setTargets(out)
	return out
}

func TestRebalancePlan(t *testing.T) {
	for _, c := range []struct {
		name  string
		rows  []balanceRow
		need  int
		alloc []int
	}{
		{"third joins", rows([2]int{100, 150}, [2]int{100, 150}, [2]int{100, 0}), 90, []int{45, 45, 0}},
		{"balanced", rows([2]int{100, 105}, [2]int{100, 95}, [2]int{100, 100}), 0, []int{0, 0, 0}},
		{"weights", rows([2]int{100, 60}, [2]int{100, 60}, [2]int{200, 0}), 54, []int{27, 27, 0}},
		// A drained backend (weight 0 here) keeps its flows: not a source,
		// not counted.
		{"drained left alone", rows([2]int{0, 500}, [2]int{100, 100}, [2]int{100, 0}), 45, []int{0, 45, 0}},
		{"few flows", rows([2]int{100, 2}, [2]int{100, 1}, [2]int{100, 0}), 0, []int{0, 0, 0}},
		{"one backend", rows([2]int{100, 50}), 0, []int{0}},
		{"nothing live", rows([2]int{100, 0}, [2]int{100, 0}), 0, []int{0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			need := closesNeeded(c.rows)
			alloc := allocate(c.rows, need)
			if need != c.need || fmt.Sprint(alloc) != fmt.Sprint(c.alloc) || balanced(c.rows) != (need == 0) {
				t.Fatalf("need %d alloc %v, want %d %v", need, alloc, c.need, c.alloc)
			}
		})
	}
}
