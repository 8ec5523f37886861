// `l4lb rebalance` against the real daemon: 300 long-lived connections on
// two backends, a third joins by `l4lb reload`, and a rebalance moves a
// third of them at the configured rate, with an orderly EOF for each.

package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

var vipRebalance = newConf(`drain_timeout = "3s"`).vip("a", ":80", `algorithm = "least_conn"`, `rebalance_rate = 50`).health(`type = "none"`).backends(2, 7000).String()

// longClients hold connections through the VIP; each reads until its
// connection ends and reconnects at once after an orderly EOF. Anything
// else is recorded.
type longClients struct {
	tp *testutil.Topology
	wg sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	conns    map[int]*clientConn
	eofs     int
	errs     []error
}

func holdLongClients(t *testing.T, tp *testutil.Topology, n int) *longClients {
	t.Helper()
	h := &longClients{tp: tp, conns: map[int]*clientConn{}}
	t.Cleanup(h.stop)
	for i := range n {
		c, err := h.dial()
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		h.mu.Lock()
		h.conns[i] = c
		h.mu.Unlock()
		h.wg.Add(1)
		go h.hold(i, c)
	}
	return h
}

func (h *longClients) dial() (*clientConn, error) {
	c, err := dialVIP(h.tp, 80)
	if err == nil {
		c.SetDeadline(time.Time{}) // long-lived: no deadline
	}
	return c, err
}

func (h *longClients) hold(i int, c *clientConn) {
	defer h.wg.Done()
	for {
		_, err := c.r.ReadByte() // the backend sends nothing after its name
		c.Close()
		h.mu.Lock()
		if h.stopping {
			h.mu.Unlock()
			return
		}
		delete(h.conns, i)
		if err == io.EOF {
			h.eofs++
		} else {
			h.errs = append(h.errs, fmt.Errorf("client %d on %s: %w", i, c.backend, err))
		}
		h.mu.Unlock()
		c, err = h.dial()
		h.mu.Lock()
		if err != nil {
			h.errs = append(h.errs, fmt.Errorf("client %d reconnecting: %w", i, err))
			h.mu.Unlock()
			return
		}
		h.conns[i] = c
		h.mu.Unlock()
	}
}

func (h *longClients) stop() {
	h.mu.Lock()
	h.stopping = true
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// spread counts connected clients per backend.
func (h *longClients) spread() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, c := range h.conns {
		out[c.backend]++
	}
	return out
}

func TestRebalanceCommand(t *testing.T) {
	const conns, rate = 300, 50
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	lb := startLB(t, tp, vipRebalance)
	sock := lb.sock
	clients := holdLongClients(t, tp, conns)
	if s := clients.spread(); s["be0"] != conns/2 || s["be1"] != conns/2 {
		t.Fatalf("before: %v", s)
	}

	lb.writeConfig(t, lb.currentConfig(t)+"  [[vip.backend]]\n  name = \"be2\"\n  address = \"198.18.1.13:7000\"\n")
	if out, errOut, code := lb.run(t, "reload"); code != 0 {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, _ := lb.run(t, "rebalance", "--dry-run", "a"); !strings.Contains(out, "one now would close about 90 at 50/s") {
		t.Fatalf("dry run said:\n%s", out)
	}

	start := time.Now()
	out, errOut, code := lb.run(t, "rebalance", "--wait", "a")
	took := time.Since(start)
	if code != 0 || !strings.Contains(out, "rebalance started: closing about 90 connections at 50/s (FIN to both sides)") ||
		!strings.Contains(out, "rebalance done after") {
		t.Fatalf("rebalance --wait: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("l4lb rebalance --wait took %v:\n%s", took, out)
	st := lb.status(t).VIPs[0].Rebalance
	// least_conn sends every closed client to be2: the plan is what closes.
	if st == nil || st.State != "done" || st.Closed != 90 || st.Planned != 90 {
		t.Fatalf("status: %+v", st)
	}
	if ran, least := st.Ended.Sub(st.Started), time.Duration(float64(st.Closed-rate/10)/rate*float64(time.Second)); ran < least {
		t.Fatalf("closed %d at %d/s in %v, want at least %v", st.Closed, rate, ran, least)
	}

	testutil.Eventually(t, 10*time.Second, "every client reconnected", func() bool {
		n := 0
		for _, k := range clients.spread() {
			n += k
		}
		return n == conns
	})
	for _, b := range lb.status(t).VIPs[0].Backends {
		if math.Abs(float64(b.LiveFlows)-conns/3) > conns/3/10 {
			t.Fatalf("backend %s holds %d of %d, not within 10%% of a third (clients see %v)", b.ID, b.LiveFlows, conns, clients.spread())
		}
	}
	clients.mu.Lock()
	eofs, errs := clients.eofs, clients.errs
	clients.mu.Unlock()
	if len(errs) > 0 || eofs != st.Closed {
		t.Fatalf("%d closed, %d clients saw an orderly EOF, %d something else (first: %v)", st.Closed, eofs, len(errs), errs)
	}
	if out, _, _ := lb.run(t, "status"); !strings.Contains(out, "rebalance done: closed") {
		t.Fatalf("status:\n%s", out)
	}

	// Mistakes and refusals: a message, exit 1 (2 for usage).
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rebalance", "--socket", sock, "nosuch"}, 1, `vip "nosuch": no such VIP`},
		{[]string{"rebalance", "--socket", sock, "--rate", "20000", "a"}, 2, "out of range: a rebalance closes 1 to 10000 connections a second"},
		{[]string{"rebalance", "--socket", sock}, 2, "want one VIP name"},
		{[]string{"rebalance", "--socket", sock, "--stop", "--rate", "5", "a"}, 2, "take no other action flag"},
	} {
		_, errOut, code := l4lbCmd(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Fatalf("l4lb %v: exit %d\n%s\nwant exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	if out, _, code := lb.run(t, "rebalance", "--stop", "a"); code != 0 || !strings.Contains(out, "rebalance done") {
		t.Fatalf("--stop after the end: exit %d\n%s", code, out)
	}
}
