// End-to-end: first_byte_timeout through the daemon, its counters, and a
// reload that changes it.

package main

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// firstByteConf has VIP web with first_byte_timeout; health none: the
// backend counts connections, so no probes.
func firstByteConf(timeout string) string {
	return newConf().vip("web", ":80", fmt.Sprintf("first_byte_timeout = %q", timeout)).health(`type = "none"`).addrs(7000, 0).String()
}

// TestFirstByteTimeoutDaemon: with first_byte_timeout a silent client is
// closed (FIN) after it and the backend never sees a connection; a client
// that speaks is proxied; status counts the timeout; after a reload that
// turns it off a silent client reaches the backend.
func TestFirstByteTimeoutDaemon(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	var accepted atomic.Int64
	var ln net.Listener
	tp.Backends[0].MustDo(t, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("%s:7000", tp.BackendIP(0)))
		return err
	})
	t.Cleanup(func() { ln.Close() })
	testutil.ServeConns(ln, func(c net.Conn) { // counts, then echoes
		defer c.Close()
		accepted.Add(1)
		c.SetDeadline(time.Now().Add(30 * time.Second))
		io.Copy(c, c)
	})
	lb := startLB(t, tp, firstByteConf("400ms"))
	dial := func() net.Conn {
		var c net.Conn
		tp.Client.MustDo(t, func() (err error) {
			c, err = net.DialTimeout("tcp4", tp.VIP.String()+":80", 5*time.Second)
			return err
		})
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}

	start := time.Now()
	silent := dial()
	if b, err := io.ReadAll(silent); err != nil || len(b) != 0 {
		t.Fatalf("silent client: read %q, %v; want a FIN", b, err)
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("closed after %v, before first_byte_timeout", took)
	}
	speaks := dial()
	speaks.Write([]byte("hello"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(speaks, got); err != nil || string(got) != "hello" {
		t.Fatalf("speaking client: read %q, %v", got, err)
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("backend accepted %d connections, want 1 (the speaking client's)", n)
	}
	if st := lb.status(t); st.VIPs[0].TCP == nil || st.VIPs[0].TCP.FirstByteTimeouts != 1 {
		t.Fatalf("status: %+v", st.VIPs[0].TCP)
	}
	if out, _, _ := l4lbCmd(t, "status", "--socket", lb.cfg[:strings.LastIndex(lb.cfg, "/")]+"/admin.sock"); !strings.Contains(out, "first-byte-timeouts 1") {
		t.Fatalf("status text lacks the counter:\n%s", out)
	}

	lb.writeConfig(t, strings.Replace(lb.currentConfig(t), `first_byte_timeout = "400ms"`, `first_byte_timeout = "0s"`, 1))
	lb.reloadOK(t)
	dial() // silent, and reaches the backend now
	testutil.Eventually(t, 5*time.Second, "a silent client reaches the backend once off", func() bool { return accepted.Load() == 2 })
}
