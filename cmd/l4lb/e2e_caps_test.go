// End-to-end: per-backend max_conns through the daemon: caps hold, the
// overflow waits in arrival order, a reload that raises a cap serves it,
// queue_timeout resets and counts.

package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

var capsConfig = newConf().vip("db", ":80", `algorithm = "least_conn"`, `queue_timeout = "30s"`).health(`type = "none"`).
	named("be0", 0, 7000, `max_conns = 5`).named("be1", 1, 7000, `max_conns = 5`).named("be2", 2, 7000, `max_conns = 10`).String()

// waitingConn is a client through the VIP whose backend's name line (sent
// by namedEcho once the proxy connects it) may not have come yet.
type waitingConn struct {
	net.Conn
	served chan string // the backend's name, once connected; closed on an error
	err    error       // the error, once served is closed without a name
}

func dialWaiting(t *testing.T, tp *testutil.Topology) *waitingConn {
	t.Helper()
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp4", tp.VIP.String()+":80", 5*time.Second)
		return err
	})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second))
	w := &waitingConn{Conn: c, served: make(chan string, 1)}
	go func() {
		name, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			w.err = err
			close(w.served)
			return
		}
		w.served <- strings.TrimSpace(name)
	}()
	return w
}

// backend returns the client's backend once served within d, or "".
func (w *waitingConn) backend(d time.Duration) string {
	select {
	case name := <-w.served:
		w.served <- name // keep it for the next look
		return name
	case <-time.After(d):
		return ""
	}
}

// TestBackendCapsDaemon: caps 5/5/10 and 30 long-lived clients plus a
// 31st: 20 are served and no backend ever holds more than its cap (the
// clients' own count and status agree); 11 wait; a closed client's slot
// goes to the oldest waiter; a reload raising be0's cap to 15 serves the
// other 10 at once, cutting nobody; then with queue_timeout 300ms a new
// client finding every backend full is reset and counted.
func TestBackendCapsDaemon(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	lb := startLB(t, tp, capsConfig)
	caps := map[string]int{"be0": 5, "be1": 5, "be2": 10}
	var cs []*waitingConn
	open := map[string]int{}
	for i := range 31 {
		c := dialWaiting(t, tp)
		cs = append(cs, c)
		if i < 20 {
			be := c.backend(10 * time.Second)
			if be == "" {
				t.Fatalf("client %d not served with free slots", i)
			}
			if open[be]++; open[be] > caps[be] {
				t.Fatalf("%s holds %d clients, cap %d", be, open[be], caps[be])
			}
			continue
		}
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("client %d queued", i), func() bool {
			st := lb.status(t)
			return st.VIPs[0].TCP != nil && st.VIPs[0].TCP.Queued == int64(i-19)
		})
	}
	st := lb.status(t)
	for _, b := range st.VIPs[0].Backends {
		if b.LiveFlows != int64(caps[b.ID]) || b.MaxFlows != int64(caps[b.ID]) {
			t.Fatalf("status %s: live %d, max %d; want both %d", b.ID, b.LiveFlows, b.MaxFlows, caps[b.ID])
		}
	}
	for i := 20; i < 31; i++ {
		if be := cs[i].backend(50 * time.Millisecond); be != "" {
			t.Fatalf("client %d served by %s beyond the caps", i, be)
		}
	}
	if out, _, _ := lb.run(t, "status"); !strings.Contains(out, "queued 11") || !strings.Contains(out, "5/5") {
		t.Fatalf("status text lacks the queue or the caps:\n%s", out)
	}
	if out, _, _ := lb.run(t, "explain", "db", tp.ClientIP.String()); !strings.Contains(out, "FULL: at its cap of 10, skipped") {
		t.Fatalf("explain does not say the backends are full:\n%s", out)
	}

	// One closes: the oldest waiter, and only it, takes the slot.
	first := cs[0].backend(time.Second)
	cs[0].Close()
	if be := cs[20].backend(10 * time.Second); be != first {
		t.Fatalf("oldest waiter served by %q, want %s (the closed client's)", be, first)
	}
	if be := cs[21].backend(200 * time.Millisecond); be != "" {
		t.Fatalf("second waiter served by %s with no slot free", be)
	}

	// A reload raises be0's cap: the 10 waiters left are served on be0.
	lb.writeConfig(t, strings.Replace(lb.currentConfig(t), "max_conns = 5\n  [[vip.backend]]\n  name = \"be1\"", "max_conns = 15\n  [[vip.backend]]\n  name = \"be1\"", 1))
	lb.reloadOK(t)
	for i := 21; i < 31; i++ {
		if be := cs[i].backend(10 * time.Second); be != "be0" {
			t.Fatalf("after the reload waiter %d served by %q, want be0", i, be)
		}
	}
	for i := 1; i < 31; i++ { // nobody was cut
		cs[i].SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := cs[i].Write([]byte("x")); err != nil {
			t.Fatalf("client %d cut: %v", i, err)
		}
	}
	st = lb.status(t)
	if q := st.VIPs[0].TCP; q.Queued != 0 || q.QueueWaits != 11 || q.QueueTimeouts != 0 {
		t.Fatalf("queue status after the reload: %+v", q)
	}

	// Every backend full again (15/5/10): queue_timeout resets and counts.
	lb.writeConfig(t, strings.Replace(lb.currentConfig(t), `queue_timeout = "30s"`, `queue_timeout = "300ms"`, 1))
	lb.reloadOK(t)
	late := dialWaiting(t, tp)
	start := time.Now()
	late.SetReadDeadline(time.Now().Add(10 * time.Second))
	if name, ok := <-late.served; ok {
		t.Fatalf("a client was served past every cap, by %s", name)
	}
	if !errors.Is(late.err, syscall.ECONNRESET) {
		t.Fatalf("late client ended with %v after %v, want a reset", late.err, time.Since(start))
	}
	testutil.Eventually(t, 5*time.Second, "queue timeout counted", func() bool {
		return lb.status(t).VIPs[0].TCP.QueueTimeouts == 1
	})
}
