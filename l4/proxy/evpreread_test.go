package proxy

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// preReadCase is how a test makes one pre-read stage apply, and what its
// timeout does.
type preReadCase struct {
	name     string
	settings Settings
	routes   bool // the VIP has SNI routes
	timeouts func(*ServiceStats) *atomic.Uint64
	reset    bool // a silent client is reset (else closed with a FIN)
}

// preReadCases has a case for every stage of the list; with wait the
// stage's timeout.
func preReadCases(wait time.Duration) map[preStage]preReadCase {
	return map[preStage]preReadCase{
		preHeader: {name: "proxy header", settings: Settings{AcceptProxy: AcceptProxyV1, AcceptProxyFrom: loopback, ConnectTimeout: wait},
			timeouts: func(s *ServiceStats) *atomic.Uint64 { return &s.ProxyTimeouts }, reset: true},
		preFirstByte: {name: "first byte", settings: Settings{FirstByteTimeout: wait},
			timeouts: func(s *ServiceStats) *atomic.Uint64 { return &s.FirstByteTimeouts }},
		preHello: {name: "client hello", routes: true,
			timeouts: func(s *ServiceStats) *atomic.Uint64 { return &s.SNITimeouts }, reset: true},
	}
}

// newPreReadService starts a VIP where stage tc applies (its timeout
// wait) in front of a backend that counts its connections.
func newPreReadService(t *testing.T, tc preReadCase, wait time.Duration) (*testService, *atomic.Int64) {
	addr, _, conns := recordServer(t)
	ts := newService(t, tc.settings, addr)
	if tc.routes {
		r := &Route{Name: "r", Snapshots: &snapshot.Store{}}
		equalBackends(t, r.Snapshots, []netip.AddrPort{addr})
		rt, err := NewRoutes([]*Route{r}, [][]string{{"a.example.com"}}, wait, NoRouteDefault)
		if err != nil {
			t.Fatal(err)
		}
		ts.SetRoutes(rt)
	}
	return ts, conns
}

// TestPreReadStages holds every stage of the pre-read list to the
// skeleton they share: a silent client is ended once the stage's wait
// runs out (counted on the stage's counter, reset or closed as the stage
// says) and a drain's end reaches a client still waiting; neither ever
// dials a backend. A stage added to the list fails here until it has a
// case.
func TestPreReadStages(t *testing.T) {
	const wait = 300 * time.Millisecond
	cases, long := preReadCases(wait), preReadCases(time.Hour)
	for p := preHeader; p < preDone; p++ {
		tc, ok := cases[p]
		if !ok {
			t.Fatalf("pre-read stage %d has no case here", p)
		}
		t.Run(tc.name+"/silent", func(t *testing.T) {
			ts, conns := newPreReadService(t, tc, wait)
			took, err := silentUntilEnd(t, ts)
			if isReset(err) != tc.reset || !tc.reset && err != nil {
				t.Fatalf("silent client ended by %v; want a reset: %v", err, tc.reset)
			}
			if took < wait {
				t.Fatalf("ended after %v, before the stage's %v", took, wait)
			}
			testutil.Eventually(t, 5*time.Second, "timeout counted, connection ended", func() bool {
				return tc.timeouts(&ts.Stats).Load() == 1 && ts.Stats.Active.Load() == 0
			})
			if n := conns.Load(); n != 0 {
				t.Fatalf("%d backend connections for a silent client", n)
			}
		})
		t.Run(tc.name+"/drain", func(t *testing.T) {
			ts, conns := newPreReadService(t, long[p], time.Hour)
			c := ts.dial(t)
			testutil.Eventually(t, 5*time.Second, "client accepted", func() bool { return ts.Stats.Active.Load() == 1 })
			done := drainSoon(t, ts, 100*time.Millisecond)
			readReset(t, c, "client waiting in a pre-read stage at a drain's end")
			if n := within(t, done, "drain"); n != 1 {
				t.Fatalf("drain reset %d, want 1", n)
			}
			if n, k := conns.Load(), tc.timeouts(&ts.Stats).Load(); n != 0 || k != 0 {
				t.Fatalf("%d backend connections, %d timeouts for a drained client", n, k)
			}
		})
	}
}
