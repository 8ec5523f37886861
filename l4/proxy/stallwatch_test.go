package proxy

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// stallObserver records the stall reports of a service.
type stallObserver struct {
	mu      sync.Mutex
	reports []plane.StallReport
}

func (o *stallObserver) ConnectOK(*l4.Backend, time.Duration) {}
func (o *stallObserver) ConnectFailed(*l4.Backend, error)     {}
func (o *stallObserver) BackendStall(_ *l4.Backend, r plane.StallReport) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reports = append(o.reports, r)
}

// next waits for a report after the first n that matches ok and returns
// it with the count of reports so far.
func (o *stallObserver) next(t *testing.T, n int, what string, ok func(plane.StallReport) bool) (plane.StallReport, int) {
	t.Helper()
	var got plane.StallReport
	testutil.Eventually(t, waitBound, what, func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		for i := n; i < len(o.reports); i++ {
			if ok(o.reports[i]) {
				got, n = o.reports[i], i+1
				return true
			}
		}
		return false
	})
	return got, n
}

// degradedEver reports whether any report said degraded.
func (o *stallObserver) degradedEver() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.reports {
		if r.Degraded {
			return true
		}
	}
	return false
}

// hangServer echoes each read, except that while hung is set it holds
// the reply (the bytes were read: the kernel acknowledged them), and a
// read starting with "sleep" is never answered: a long request, counted
// in longs (nil: not counted) once read.
func hangServer(t *testing.T, hung *atomic.Bool, longs *atomic.Int32) netip.AddrPort {
	return startServer(t, func(c *net.TCPConn) {
		buf := make([]byte, 512)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if bytes.HasPrefix(buf[:n], []byte("sleep")) {
				if longs != nil {
					longs.Add(1)
				}
				continue
			}
			for hung.Load() {
				time.Sleep(10 * time.Millisecond)
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	})
}

func roundTrip(t *testing.T, c *net.TCPConn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := c.Read(buf); err != nil || string(buf) != msg {
		t.Fatalf("echo %q: %q, %v", msg, buf, err)
	}
}

func newStallService(t *testing.T, stall time.Duration, obs Observer, addr netip.AddrPort) *testService {
	pipes := NewPipePool(0)
	return newServiceWith(t, pipes, testLoops(t, pipes), ListenOptions{}, func(c *TCPConfig) { c.Observer = obs },
		Settings{Name: "web", StallTimeout: stall}, addr)
}

// TestHungBackendDegradedAndBack: a request the server's kernel took but
// its process does not answer stalls the connection; with no other
// connection answering, the backend is reported degraded (the kernel
// acknowledged it: no unacked data), counted once, then reported back at
// its first byte back; turning stall_timeout off reports it back too.
func TestHungBackendDegradedAndBack(t *testing.T) {
	const stall = 300 * time.Millisecond
	var hung atomic.Bool
	obs := &stallObserver{}
	ts := newStallService(t, stall, obs, hangServer(t, &hung, nil))
	c := ts.dial(t)
	roundTrip(t, c, "hello")

	hung.Store(true)
	sent := time.Now()
	if _, err := c.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	r, n := obs.next(t, 0, "degraded", func(r plane.StallReport) bool { return r.Degraded })
	if took := time.Since(sent); took < stall || r.Waited < stall || r.Stalled != 1 || r.Conns != 1 || r.Unacked != 0 || r.ZeroWindow != 0 {
		t.Errorf("after %v: %+v; want 1 of 1 stalled for at least %v, acknowledged", took, r, stall)
	}
	if !strings.Contains(r.Reason(), "1 of 1 connections: no reply for") || !strings.Contains(r.Reason(), "acknowledged by the server's kernel") {
		t.Errorf("reason %q", r.Reason())
	}
	hung.Store(false) // the process goes on: its reply comes
	r, n = obs.next(t, n, "back", func(r plane.StallReport) bool { return !r.Degraded })
	if !strings.Contains(r.Recovered, "got a reply") {
		t.Errorf("recovered: %+v", r)
	}
	if got := ts.Stats.StallDegraded.Load(); got != 1 {
		t.Errorf("StallDegraded %d, want 1", got)
	}

	hung.Store(true)
	if _, err := c.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	_, n = obs.next(t, n, "degraded again", func(r plane.StallReport) bool { return r.Degraded })
	st := ts.Settings()
	st.StallTimeout = 0
	ts.Update(st)
	r, _ = obs.next(t, n, "back when turned off", func(r plane.StallReport) bool { return !r.Degraded })
	if r.Recovered != "stall_timeout turned off" {
		t.Errorf("turned off: %+v", r)
	}
	hung.Store(false)
}

// TestHungNextToProgress: a request that is never answered (a long
// query) degrades nothing while another connection of the backend got
// replies after it was sent, however long that one then pauses: a pause
// longer than stall_timeout (a client between requests; or this test's
// client, server and proxy descheduled together on a loaded machine,
// which made a rule of "no byte back within stall_timeout" fail it) does
// not make a live server hung. Once the long request is the only open
// connection, nothing answered since it was sent: it degrades the backend
// (a lone long request looks hung: the documented limit), and once it
// closes, the backend is back after stall_timeout with nothing left to
// tell.
func TestHungNextToProgress(t *testing.T) {
	const stall = 300 * time.Millisecond
	var hung atomic.Bool
	var longs atomic.Int32
	obs := &stallObserver{}
	ts := newStallService(t, stall, obs, hangServer(t, &hung, &longs))
	long, busy := ts.dial(t), ts.dial(t)
	if _, err := long.Write([]byte("sleep")); err != nil {
		t.Fatal(err)
	}
	// The server holds the long request: every reply on busy comes after.
	testutil.Eventually(t, waitBound, "the long request at the server", func() bool { return longs.Load() == 1 })
	for end := time.Now().Add(2 * stall); time.Now().Before(end); {
		roundTrip(t, busy, "ping")
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3 * stall) // busy pauses: no byte back anywhere for several looks
	if obs.degradedEver() {
		t.Fatalf("degraded while another connection got replies after the long request: %+v", obs.reports)
	}
	busy.Close()
	r, n := obs.next(t, 0, "degraded once the long request is alone", func(r plane.StallReport) bool { return r.Degraded })
	if r.Stalled != 1 || r.Conns != 1 || r.Waited < 5*stall {
		t.Errorf("%+v; want 1 of 1 stalled since before the pings", r)
	}
	long.Close()
	r, _ = obs.next(t, n, "back with nothing left to tell", func(r plane.StallReport) bool { return !r.Degraded })
	if !strings.Contains(r.Recovered, "no stalled connection and no reply") {
		t.Errorf("recovered: %+v", r)
	}
}
