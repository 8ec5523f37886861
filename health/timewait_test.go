// timewait_test.go: which side keeps TIME_WAIT after a probe, read from /proc/net/tcp.

package health

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// timeWaits counts TIME_WAIT sockets on 127.0.0.1 whose local port
// (server side) or remote port (prober side) is port.
func timeWaits(t *testing.T, port uint16) (server, prober int) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(procNetTCP(t)))
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || fs[3] != "06" { // 06 = TIME_WAIT
			continue
		}
		if hexPort(fs[1]) == port {
			server++
		}
		if hexPort(fs[2]) == port {
			prober++
		}
	}
	return server, prober
}

// procNetTCP reads this thread's /proc/net/tcp. Not /proc/net/tcp: that is
// /proc/self/net, the namespace of the process's main thread, which a
// parallel test's goroutine may have locked and moved into a namespace
// (a probe loop started with Netns.Enter); then it lists that namespace's
// sockets and none of these.
func procNetTCP(t *testing.T) string {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := os.ReadFile("/proc/thread-self/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hexPort reads the port of "0100007F:1F90".
func hexPort(addr string) uint16 {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.ParseUint(p, 16, 16)
	return uint16(n)
}

// TestServerClosesFirst: redis (QUIT), http (Connection: close) and
// WebSocket (Close frame) probes let the server close first, so the
// TIME_WAIT stays on the server, not on the balancer; the tcp check
// closes first and keeps it.
func TestServerClosesFirst(t *testing.T) {
	t.Parallel()
	redis := testutil.StartRedis(t, "127.0.0.1:0", "")
	web := testutil.StartWebSocketServer(t, "127.0.0.1:0")
	ws := testutil.StartWebSocketServer(t, "127.0.0.1:0")
	tcpSrv := startServer(t, nil, false)
	cases := []struct {
		spec        Spec
		addr        netip.AddrPort
		proberKeeps bool
	}{
		{Spec{Type: l4.CheckRedis}, redis.Addr, false},
		{Spec{Type: l4.CheckHTTP}, web.Addr, false},
		{Spec{Type: l4.CheckHTTP, WebSocket: true}, ws.Addr, false},
		{Spec{Type: l4.CheckTCP}, tcpSrv.addr(), true},
	}
	for _, c := range cases {
		// Earlier runs may have left TIME_WAIT sockets on a reused port:
		// count only what these probes add.
		server0, prober0 := timeWaits(t, c.addr.Port())
		for range 5 {
			wantOK(t, check(t, c.spec, c.addr))
		}
		// A close whose last FIN is still on its way (a loaded machine,
		// closeGrace passed) reaches TIME_WAIT a little later: wait for
		// the counts to settle before judging them.
		var server, prober int
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			server, prober = timeWaits(t, c.addr.Port())
			server, prober = server-server0, prober-prober0
			if (c.proberKeeps && prober >= 5) || (!c.proberKeeps && server >= 5) || time.Now().After(deadline) {
				break
			}
		}
		name := fmt.Sprintf("%s: TIME_WAIT server %d prober %d", c.spec.Type, server, prober)
		if c.proberKeeps != (prober >= 5) || c.proberKeeps == (server >= 5) {
			t.Error(name)
		}
	}
}
