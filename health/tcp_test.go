// tcp_test.go: the tcp check against live, closed, silent and blackholed addresses.

package health

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// slack is how late past its timeout a check may return: scheduling on a
// loaded 2-core machine, not the checker, sets this bound.
const slack = 200 * time.Millisecond

func TestTCPHealthyAndPoliteClose(t *testing.T) {
	// A greeting server is the RST-prone case: its bytes arrive unread.
	s := startServer(t, []byte("hello from a server that speaks first\r\n"), false)
	for range 3 {
		r := check(t, Spec{Type: l4.CheckTCP}, s.addr())
		wantOK(t, r)
		if !r.KernelRTT {
			t.Errorf("connect %v came from the wall clock, want TCP_INFO", r.Connect)
		}
		if r.FirstByte != 0 {
			t.Errorf("tcp check has a first byte time %v", r.FirstByte)
		}
	}
	for i, k := range s.waitCloses(t, 3) {
		if k != closedFIN {
			t.Errorf("connection %d ended with %s, want fin", i, k)
		}
	}
	for i, b := range s.got {
		if len(b) != 0 {
			t.Errorf("connection %d: tcp check sent %q, want nothing", i, b)
		}
	}
}

func TestTCPRefused(t *testing.T) {
	r := check(t, Spec{Type: l4.CheckTCP}, closedPort(t))
	wantFail(t, r, "connect refused")
	if r.Connect != 0 {
		t.Errorf("connect time %v for a refused connect", r.Connect)
	}
}

func TestTCPProbePort(t *testing.T) {
	s := startServer(t, nil, false)
	backend := netip.AddrPortFrom(s.addr().Addr(), 1) // nothing on port 1
	spec := Spec{Type: l4.CheckTCP, Port: s.addr().Port()}
	wantOK(t, check(t, spec, spec.ProbeAddr(backend)))
}

// blackhole returns a fresh namespace and an address whose SYNs vanish
// there: a static neighbour entry sends them to a MAC nobody owns.
func blackhole(t *testing.T) (*testutil.Netns, netip.AddrPort) {
	t.Helper()
	testutil.RequirePriv(t, "namespaces for a blackholed address")
	a := testutil.NewNetns(t, "bh")
	b := testutil.NewNetns(t, "bhpeer")
	testutil.Veth(t, a, "v0", "198.18.5.1/24", b, "v1", "")
	a.MustExec(t, "ip", "neigh", "replace", "198.18.5.99", "lladdr", "02:00:00:00:00:99", "dev", "v0", "nud", "permanent")
	return a, netip.MustParseAddrPort("198.18.5.99:5432")
}

// TestTCPBlackhole probes an address whose SYNs vanish.
func TestTCPBlackhole(t *testing.T) {
	a, addr := blackhole(t)
	const timeout = 300 * time.Millisecond
	ch := mustCheck(t, Spec{Type: l4.CheckTCP, Timeout: timeout})
	var r Result
	a.MustDo(t, func() error {
		r = ch.Check(context.Background(), addr)
		return nil
	})
	wantFail(t, r, "timeout after 300ms connecting")
	if r.Took < timeout || r.Took > timeout+slack {
		t.Errorf("took %v, want about %v", r.Took, timeout)
	}
}

func TestCheckCanceled(t *testing.T) {
	s := startServer(t, nil, true)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	r := mustCheck(t, Spec{Type: l4.CheckRedis, Timeout: 5 * time.Second, Interval: 5 * time.Second}).Check(ctx, s.addr())
	wantFail(t, r, "canceled")
	if r.Took > time.Second {
		t.Errorf("canceled check took %v", r.Took)
	}
}

// TestSilentServerTimeouts: every protocol check against a server that
// accepts and never answers fails with a timeout reason within the
// timeout plus a little.
func TestSilentServerTimeouts(t *testing.T) {
	s := startServer(t, nil, true)
	const timeout = 250 * time.Millisecond
	cases := []struct {
		spec Spec
		want string
	}{
		{Spec{Type: l4.CheckSendExpect, Send: []byte("hi\n"), Expect: []byte("ho")}, "timeout after 250ms waiting for reply"},
		{Spec{Type: l4.CheckPostgres}, "timeout after 250ms waiting for SSLRequest reply"},
		{Spec{Type: l4.CheckMySQL}, "timeout after 250ms waiting for greeting"},
		{Spec{Type: l4.CheckRedis}, "timeout after 250ms waiting for PING reply"},
		{Spec{Type: l4.CheckHTTP}, "timeout after 250ms waiting for status line"},
		{Spec{Type: l4.CheckHTTP, WebSocket: true}, "timeout after 250ms waiting for status line"},
	}
	for _, c := range cases {
		t.Run(c.spec.Type.String(), func(t *testing.T) {
			t.Parallel()
			c.spec.Timeout = timeout
			r := check(t, c.spec, s.addr())
			wantFail(t, r, c.want)
			if r.Took < timeout || r.Took > timeout+slack {
				t.Errorf("took %v, want %v plus a little", r.Took, timeout)
			}
		})
	}
}
