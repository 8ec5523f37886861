// End-to-end tests of the daemon's lifecycle: status while a stop drains.
package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// waitExit waits up to d for l4lb to exit and fails unless it exits 0.
func waitExit(t *testing.T, lb *lbProcess, d time.Duration, why string) {
	t.Helper()
	select {
	case <-lb.exited:
		if lb.err != nil {
			t.Fatalf("l4lb exited with %v", lb.err)
		}
	case <-time.After(d):
		t.Fatalf("l4lb still runs %v after %s", d, why)
	}
}

// TestStatusDuringStop: while a SIGTERM drains, status lists the VIPs
// that drain, with their live connections, and says l4lb is stopping.
func TestStatusDuringStop(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	for i := range 2 {
		namedEcho(t, tp, i, 7000)
	}
	lb := startLB(t, tp, strings.Replace(vipA, `drain_timeout = "3s"`, `drain_timeout = "60s"`, 1))
	c := mustDialVIP(t, tp, 80)
	lb.signal(t, syscall.SIGTERM)
	lb.waitLog(t, "shutting down")
	testutil.Eventually(t, 10*time.Second, "status to list VIP a as draining", func() bool {
		v := vipOf(lbStatus(t, lb), "a")
		return v.Draining
	})
	st := lbStatus(t, lb)
	if v := vipOf(st, "a"); !st.Stopping || v.Active != 1 || len(v.Backends) != 2 {
		t.Errorf("status during the stop: stopping %v, VIP a %+v; want stopping, 1 active connection, its 2 backends", st.Stopping, v)
	}
	out, errOut, code := l4lbCmd(t, "status", "--socket", adminSock(lb))
	if code != 0 || !strings.Contains(out, "STOPPING") || !strings.Contains(out, "VIP a ") ||
		!strings.Contains(out, "active 1 ") || !strings.Contains(out, "DRAINING (l4lb is stopping)") {
		t.Errorf("l4lb status during the stop: exit %d\n%s%s", code, out, errOut)
	}
	if err := c.echo("during the drain"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitExit(t, lb, 10*time.Second, "its last connection closed")
}
