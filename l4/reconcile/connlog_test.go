// The per-connection log through the runtime: on_down = reset and an
// operator's disable name their ends, and a reload turns the log on for
// new connections.

package reconcile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	dnsnames "github.com/l4lb/l4lb/internal/names"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// observedRuntime is startRuntime with a logger whose lines the test reads.
func observedRuntime(t *testing.T, toml string) (*Runtime, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	rt := New(zap.New(core), Options{Names: dnsnames.New(zap.New(core))})
	apply(t, rt, toml)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
	})
	return rt, logs
}

const connLogVIP = `
[global]
admin_socket = "off"
[[vip]]
name = "web"
listen = "%s"
log_connections = %v
  [vip.health]
  interval = "200ms"
  timeout = "100ms"
  fall = 1
  on_down = "reset"
  [[vip.backend]]
  name = "a"
  address = "%s"
`

// TestOnDownLogsConnection: a connection reset by on_down = "reset" logs
// end on_down, with its backend and bytes; one opened before a reload
// turned log_connections on logs nothing.
func TestOnDownLogsConnection(t *testing.T) {
	srv := startNamed(t, "a")
	vip := testutil.FreeTCPAddr(t)
	rt, logs := observedRuntime(t, fmt.Sprintf(connLogVIP, vip, false, srv.addr))
	waitBackend(t, rt, "web", "a", 3*time.Second, "up", func(b plane.BackendStatus) bool { return b.Health == "up" })
	pinged(t, vip) // before the reload: not logged
	apply(t, rt, fmt.Sprintf(connLogVIP, vip, true, srv.addr))
	c := pinged(t, vip)
	srv.kill()
	checkConnLine(t, logs, "on_down", c)
	wantReset(t, c, "on_down = reset")
}

// TestDisableLogsConnection: a connection reset because an operator
// disabled its backend logs end disabled.
func TestDisableLogsConnection(t *testing.T) {
	srv := startNamed(t, "a")
	vip := testutil.FreeTCPAddr(t)
	rt, logs := observedRuntime(t, fmt.Sprintf(connLogVIP, vip, true, srv.addr))
	waitBackend(t, rt, "web", "a", 3*time.Second, "up", func(b plane.BackendStatus) bool { return b.Health == "up" })
	c := pinged(t, vip)
	if res, err := rt.SetOverride("web", "a", l4.OverrideDisable, "test", true); err != nil || res.Reset != 1 {
		t.Fatalf("disable: %+v, %v", res, err)
	}
	checkConnLine(t, logs, "disabled", c)
	wantReset(t, c, "disable")
}

// wantReset reads c (which wrote nothing since its last answer) and fails
// unless the connection was reset: a plain FIN would read as EOF.
func wantReset(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: read %d bytes, %v; want a reset (ECONNRESET)", what, n, err)
	}
}

// pinged is a connection to vip that has sent "ping\n" and read the
// server's name and the echo.
func pinged(t *testing.T, vip fmt.Stringer) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp4", vip.String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	c.Write([]byte("ping\n"))
	for range 2 { // the server's name, then the echo
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// checkConnLine waits for the one connection line and checks that it is
// c's, ended by end, with the bytes of pinged.
func checkConnLine(t *testing.T, logs *observer.ObservedLogs, end string, c net.Conn) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "the connection's line", func() bool { return logs.FilterMessage("connection").Len() > 0 })
	time.Sleep(100 * time.Millisecond)
	lines := logs.FilterMessage("connection").All()
	if len(lines) != 1 {
		t.Fatalf("%d connection lines, want 1: %v", len(lines), lines)
	}
	m := lines[0].ContextMap()
	want := map[string]any{"end": end, "vip": "web", "backend": "a", "client": c.LocalAddr().String(),
		"bytes_in": uint64(5), "bytes_out": uint64(7), "retries": int64(0)}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v: %v", k, m[k], v, m)
		}
	}
}
