// End-to-end: operator actions on kernel-forwarded connections: a
// rebalance closes them with a FIN both ways, disable resets them, and
// an upgrade leaves them running in the old process.

package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// TestKernelForwardRebalance: 60 long-lived kernel-forwarded connections
// on two backends, a third joins, and a rebalance closes about a third of them
// with a FIN both ways: each closed client sees an orderly EOF, and the
// kernel held every connection before.
func TestKernelForwardRebalance(t *testing.T) {
	const conns = 60
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	conf := newConf(`drain_timeout = "3s"`, `kernel_forwarding = "auto"`).vip("a", ":80", `algorithm = "least_conn"`, `rebalance_rate = 50`).health(`type = "none"`).backends(2, 7000).String()
	lb := startLB(t, tp, conf)
	clients := holdLongClients(t, tp, conns)
	lb.waitStatus(t, 10*time.Second, "every connection in the kernel", func(st plane.Status) bool { return st.Kernel.Conns == conns })

	lb.writeConfig(t, lb.currentConfig(t)+"  [[vip.backend]]\n  name = \"be2\"\n  address = \"198.18.1.13:7000\"\n")
	if out, errOut, code := lb.run(t, "reload"); code != 0 {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := lb.run(t, "rebalance", "--wait", "a")
	if code != 0 || !strings.Contains(out, "rebalance done after") {
		t.Fatalf("rebalance --wait: exit %d\n%s%s", code, out, errOut)
	}
	st := lb.status(t).VIPs[0].Rebalance
	if st == nil || st.Closed == 0 || st.Closed != st.Planned {
		t.Fatalf("rebalance status: %+v", st)
	}
	testutil.Eventually(t, 10*time.Second, "every client reconnected", func() bool {
		n := 0
		for _, k := range clients.spread() {
			n += k
		}
		return n == conns
	})
	clients.mu.Lock()
	eofs, errs := clients.eofs, clients.errs
	clients.mu.Unlock()
	if len(errs) > 0 || eofs != st.Closed {
		t.Fatalf("%d closed, %d clients saw an orderly EOF, %d something else (first: %v)", st.Closed, eofs, len(errs), errs)
	}
	if s := clients.spread(); s["be2"] != int(st.Closed) {
		t.Fatalf("after the rebalance: %v", s)
	}
}

// TestKernelForwardDisableResets: status shows a kernel-forwarded
// connection on the kernel path, and `l4lb disable` resets it
// (the connection to the backend): the client sees a reset,
// not an EOF, and the kernel holds no connection after.
func TestKernelForwardDisableResets(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	namedEchoes(t, tp)
	lb := startLB(t, tp, newConf(`kernel_forwarding = "auto"`).vip("a", ":80").health(`type = "none"`).backends(1, 7000).String())
	c, err := dialVIP(tp, 80)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lb.waitStatus(t, 10*time.Second, "the connection in the kernel", func(st plane.Status) bool { return st.Kernel.Conns == 1 })
	fmt.Fprintf(c, "ping\n")
	if line, err := c.r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo through the kernel: %q, %v", line, err)
	}
	if out := lb.statusText(t); !strings.Contains(out, "kernel forwarding: loaded; TCP connections in the kernel 1, in the loops 0") {
		t.Fatalf("status does not show the connection on the kernel path:\n%s", out)
	}
	if out := lb.verb(t, "disable", "a", "be0"); !strings.Contains(out, "1 established reset") {
		t.Fatalf("disable: %s", out)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c.r); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after disable the client saw %v, want a reset", err)
	}
	lb.waitStatus(t, 5*time.Second, "no connection in the kernel", func(st plane.Status) bool { return st.Kernel.Conns == 0 })
}

// TestKernelForwardUpgradeKeeps: an upgrade hands over what runs in user
// space; a kernel-forwarded connection stays with the old process, which
// goes on forwarding it (its program and maps are the old process's)
// until it ends or drain_timeout runs out.
func TestKernelForwardUpgradeKeeps(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	namedEchoes(t, tp)
	lb := startUpgradable(t, tp.LB, newConf(`kernel_forwarding = "auto"`, `drain_timeout = "20s"`).vip("a", ":80").health(`type = "none"`).backends(1, 7000).String())
	c, err := dialVIP(tp, 80)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lb.waitStatus(t, 10*time.Second, "the connection in the kernel", func(st plane.Status) bool { return st.Kernel.Conns == 1 })
	lb.upgradeOK(t)
	for i := range 20 {
		fmt.Fprintf(c, "ping %d\n", i)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if line, err := c.r.ReadString('\n'); err != nil || line != fmt.Sprintf("ping %d\n", i) {
			t.Fatalf("echo %d after the upgrade: %q, %v", i, line, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// New connections go to the new process, which forwards them too.
	c2, err := dialVIP(tp, 80)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "new\n")
	if line, err := c2.r.ReadString('\n'); err != nil || line != "new\n" {
		t.Fatalf("echo on a new connection: %q, %v", line, err)
	}
}
