package reconcile

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"go.uber.org/zap/zaptest"
)

const twoVIPs = `
[global]
admin_socket = "off"
[[vip]]
name = "a"
listen = "%s"
  [vip.health]
  type = "none"
  [[vip.backend]]
  address = "%s"
[[vip]]
name = "b"
listen = "%s"
  [vip.health]
  type = "none"
  [[vip.backend]]
  address = "%s"
`

// TestApplyIsAllOrNothing: a reload whose new VIP cannot bind changes
// nothing: the other new VIP is not left listening, the running one keeps
// its backend.
func TestApplyIsAllOrNothing(t *testing.T) {
	srv := startNamed(t, "s")
	a, b := testutil.FreeTCPAddr(t), testutil.FreeTCPAddr(t)
	rt := startRuntime(t, fmt.Sprintf(oneVIP, a, srv.addr))

	taken, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().(*net.TCPAddr).AddrPort()
	cfg := fmt.Sprintf(twoVIPs, b, srv.addr, busy, srv.addr)
	if err := rt.Apply(parse(t, cfg)); err == nil {
		t.Fatal("apply with an unbindable VIP succeeded")
	}
	if _, err := net.Dial("tcp4", b.String()); err == nil {
		t.Fatal("VIP b listens after a failed apply")
	}
	if st := rt.Status(); len(st.VIPs) != 1 || st.VIPs[0].Name != "a" {
		t.Fatalf("running VIPs after failed apply: %+v", st.VIPs)
	}
	if name, err := dialName(a); err != nil || name != "s" {
		t.Fatalf("VIP a after failed apply: %q, %v", name, err)
	}
	// The freed address can be used by the next good reload.
	apply(t, rt, fmt.Sprintf(twoVIPs, a, srv.addr, b, srv.addr))
	if name, err := dialName(b); err != nil || name != "s" {
		t.Fatalf("VIP b after good apply: %q, %v", name, err)
	}
}

const oneVIP = `
[global]
admin_socket = "off"
[[vip]]
name = "a"
listen = "%s"
  [vip.health]
  type = "none"
  [[vip.backend]]
  address = "%s"
`

// TestPipeCapFollowsConfig: max_pipes caps the shared pipe pool; left at
// 0 it is half the connection budget; a reload changes it in place.
func TestPipeCapFollowsConfig(t *testing.T) {
	srv := startNamed(t, "s")
	vip := testutil.FreeTCPAddr(t)
	rt := New(zaptest.NewLogger(t), Options{MaxConns: 1000})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
	})
	cfg := fmt.Sprintf(oneVIP, vip, srv.addr)
	for _, tc := range []struct {
		global string
		want   int
	}{
		{"", 500},
		{"max_pipes = 64", 64},
		{"max_pipes = 0", 500},
	} {
		apply(t, rt, strings.Replace(cfg, "[global]", "[global]\n"+tc.global, 1))
		if got := rt.Status().Pipes.Max; got != tc.want {
			t.Fatalf("with %q: pipe cap %d, want %d", tc.global, got, tc.want)
		}
	}
}

// An xdp VIP never runs as a proxy: without its interface, Apply fails
// with the reason.
func TestApplyXDPWithoutInterface(t *testing.T) {
	rt := New(zaptest.NewLogger(t), Options{})
	cfg := parse(t, `
[global]
admin_socket = "off"
[xdp]
interface = "nope-xdp0"
[[vip]]
name = "x"
listen = "127.0.0.1:5353"
protocol = "udp"
mode = "xdp"
  [[vip.backend]]
  address = "127.0.0.1:5353"
`)
	if err := rt.Apply(cfg); err == nil || !strings.Contains(err.Error(), `xdp: interface "nope-xdp0": no such interface`) {
		t.Fatalf("Apply = %v", err)
	}
	if len(rt.Status().VIPs) != 0 {
		t.Fatal("a VIP runs after the refused apply")
	}
}

// TestReloadSetsDeferAccept: a reload that turns defer_accept on or off
// applies to the VIP's running listener (no new socket, so no refused
// connect): a client that sends nothing is then held back by the kernel,
// or accepted at once again.
func TestReloadSetsDeferAccept(t *testing.T) {
	srv := startNamed(t, "s")
	vip := testutil.FreeTCPAddr(t)
	off := fmt.Sprintf(oneVIP, vip, srv.addr)
	on := strings.Replace(off, `name = "a"`, "name = \"a\"\ndefer_accept = true", 1)
	rt := startRuntime(t, off)
	accepted := func() uint64 { return rt.Status().VIPs[0].Accepted }
	silent := func() {
		c, err := net.DialTimeout("tcp4", vip.String(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}

	apply(t, rt, on)
	silent()
	time.Sleep(300 * time.Millisecond)
	if n := accepted(); n != 0 {
		t.Fatalf("defer_accept turned on by a reload: a client that sent nothing was accepted (%d)", n)
	}
	testutil.Eventually(t, 5*time.Second, "the silent client accepted once the deferral ends", func() bool { return accepted() == 1 })

	apply(t, rt, off)
	silent()
	testutil.Eventually(t, 700*time.Millisecond, "defer_accept turned off: the silent client accepted at once", func() bool { return accepted() == 2 })
}
