// Per-backend max_conns on real sockets: caps hold, waiters are served in order, time out, drain.

package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// capServer is an echo backend that counts its open connections and the
// most it ever had open at once.
type capServer struct {
	addr       netip.AddrPort
	live, peak atomic.Int64
	total      atomic.Int64
}

func startCapServer(t *testing.T) *capServer {
	t.Helper()
	s := &capServer{}
	s.addr = startServer(t, func(c *net.TCPConn) {
		n := s.live.Add(1)
		s.total.Add(1)
		for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
		}
		defer s.live.Add(-1)
		echoHandler(c)
	})
	return s
}

// cappedService is a round-robin service over fresh capServers with the
// given caps.
func cappedService(t *testing.T, st Settings, caps ...int64) (*testService, []*capServer) {
	t.Helper()
	var srv []*capServer
	var addrs []netip.AddrPort
	for range caps {
		s := startCapServer(t)
		srv, addrs = append(srv, s), append(addrs, s.addr)
	}
	ts := newService(t, st, addrs...)
	for i, c := range caps {
		ts.backends[i].SetMaxFlows(c)
	}
	return ts, srv
}

// echoed reports whether c's byte b comes back within d: the client has
// a backend.
func echoed(c *net.TCPConn, b byte, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Now().Add(waitBound))
	var got [1]byte
	n, err := c.Read(got[:])
	return err == nil && n == 1 && got[0] == b
}

// TestQueueIssueScenario is the issue's test: caps 5/5/10 and 30
// long-lived clients. The caps hold 20 of them (the counts never exceed
// the caps); the other 10 wait, and so does a 31st; as clients close,
// waiters are served in arrival order, the 31st once 11 have closed. The
// waiters' own polling is off: each close's release must wake the next.
func TestQueueIssueScenario(t *testing.T) {
	caps := []int64{5, 5, 10}
	ts, srv := cappedService(t, Settings{QueueTimeout: waitBound, queuePoll: time.Hour}, caps...) // served by wake-ups alone
	var cs []*net.TCPConn
	for i := range 31 {
		c := ts.dial(t)
		c.Write([]byte{byte(i)})
		cs = append(cs, c)
		if i < 20 {
			if !echoed(c, byte(i), 5*time.Second) {
				t.Fatalf("client %d not served with free slots", i)
			}
		} else {
			testutil.Eventually(t, 5*time.Second, fmt.Sprintf("client %d queued", i), func() bool { return ts.Queued() == i-19 })
		}
	}
	checkPeaks(t, srv, caps)
	for i := 20; i < 31; i++ {
		if echoed(cs[i], byte(i), 100*time.Millisecond) {
			t.Fatalf("client %d served beyond the caps", i)
		}
	}
	for k := range 11 { // close client k: waiter 20+k is next, nobody behind it
		cs[k].Close()
		if !echoed(cs[20+k], byte(20+k), 5*time.Second) {
			t.Fatalf("after %d closes, waiter %d not served", k+1, 20+k)
		}
		for j := 21 + k; j < 31; j++ {
			if echoed(cs[j], byte(j), 20*time.Millisecond) {
				t.Fatalf("after %d closes, waiter %d served before waiter %d", k+1, j, 20+k)
			}
		}
	}
	checkPeaks(t, srv, caps)
	if n := ts.Stats.QueueWaits.Load(); n != 11 {
		t.Fatalf("%d queue waits, want 11", n)
	}
	if n := ts.Stats.QueueTimeouts.Load(); n != 0 || ts.Queued() != 0 {
		t.Fatalf("%d queue timeouts, %d still queued", n, ts.Queued())
	}
}

func checkPeaks(t *testing.T, srv []*capServer, caps []int64) {
	t.Helper()
	for i, s := range srv {
		if p := s.peak.Load(); p > caps[i] {
			t.Fatalf("backend %d had %d connections open at once, cap %d", i, p, caps[i])
		}
	}
}

// TestQueueBurst: 200 clients at once against caps 5/5/10; every backend
// stays within its cap at every instant (its own count of open
// connections), and every client is served (they wait their turn).
func TestQueueBurst(t *testing.T) {
	caps := []int64{5, 5, 10}
	ts, srv := cappedService(t, Settings{QueueTimeout: waitBound}, caps...)
	var wg sync.WaitGroup
	var served atomic.Int64
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp4", ts.addr.String(), 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(waitBound))
			c.Write([]byte{byte(i)})
			if !echoed(c.(*net.TCPConn), byte(i), waitBound) {
				errs <- fmt.Errorf("client %d not served", i)
				return
			}
			served.Add(1)
			time.Sleep(20 * time.Millisecond) // hold the slot a little
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkPeaks(t, srv, caps)
	if served.Load() != 200 {
		t.Fatalf("%d of 200 served", served.Load())
	}
	var total int64
	for _, s := range srv {
		total += s.total.Load()
	}
	if total != 200 {
		t.Fatalf("backends saw %d connections, want 200", total)
	}
	if ts.Stats.QueueWaits.Load() == 0 {
		t.Fatalf("nobody waited: the burst did not reach the caps")
	}
}

// TestQueueTimeout: a client that waits queue_timeout for a slot is reset
// (ECONNRESET) and counted, and no backend sees it; with queue_timeout 0
// it is reset at once.
func TestQueueTimeout(t *testing.T) {
	for _, wait := range []time.Duration{300 * time.Millisecond, 0} {
		t.Run(wait.String(), func(t *testing.T) {
			ts, srv := cappedService(t, Settings{QueueTimeout: wait}, 1)
			a := ts.dial(t)
			a.Write([]byte{1})
			if !echoed(a, 1, 5*time.Second) {
				t.Fatal("first client not served")
			}
			start := time.Now()
			b, err := net.DialTimeout("tcp4", ts.addr.String(), 2*time.Second)
			switch {
			case err == nil:
				defer b.Close()
				readReset(t, b, "waiting client")
			case wait > 0 || !errors.Is(err, syscall.ECONNRESET):
				// With no wait the reset may beat the dial's own check of
				// the socket: the dial fails with it.
				t.Fatalf("dial: %v", err)
			}
			took := time.Since(start)
			if took < wait || took > wait+3*time.Second {
				t.Fatalf("reset after %v, want about %v", took, wait)
			}
			testutil.Eventually(t, 2*time.Second, "timeout counted", func() bool {
				return ts.Stats.QueueTimeouts.Load() == 1 && ts.Queued() == 0 && ts.Stats.Active.Load() == 1
			})
			if n := srv[0].total.Load(); n != 1 {
				t.Fatalf("backend saw %d connections, want 1", n)
			}
		})
	}
}

// TestQueueRaisedCap: a cap raised while clients wait (a reload: the
// runtime sets the cap, then publishes, which serves the queue) serves as
// many waiters as the new cap allows, at once: one wake-up, each served
// waiter passing the room on.
func TestQueueRaisedCap(t *testing.T) {
	ts, srv := cappedService(t, Settings{QueueTimeout: waitBound, queuePoll: time.Hour}, 1) // served by wake-ups alone
	// One client at a time: clients dialed together are accepted by
	// several loops in any order, and the queue's order is the accepts'.
	var cs []*net.TCPConn
	for i := range 4 {
		c := ts.dial(t)
		c.Write([]byte{byte(i)})
		cs = append(cs, c)
		if i == 0 {
			if !echoed(c, 0, 5*time.Second) {
				t.Fatal("first client not served")
			}
			continue
		}
		testutil.Eventually(t, 5*time.Second, fmt.Sprintf("client %d queued", i), func() bool { return ts.Queued() == i })
	}
	ts.backends[0].SetMaxFlows(3)
	ts.ServeQueue()
	for i := 1; i < 3; i++ {
		if !echoed(cs[i], byte(i), 2*time.Second) {
			t.Fatalf("waiter %d not served after the cap rose to 3", i)
		}
	}
	if echoed(cs[3], 3, 100*time.Millisecond) || ts.Queued() != 1 {
		t.Fatalf("waiter 3 served beyond the raised cap (queued %d)", ts.Queued())
	}
	checkPeaks(t, srv, []int64{3})
}

// TestQueueDrain: a drain that runs out resets the clients still waiting
// for a slot, instead of leaving them to queue_timeout.
func TestQueueDrain(t *testing.T) {
	ts, _ := cappedService(t, Settings{QueueTimeout: waitBound}, 1)
	a := ts.dial(t)
	a.Write([]byte{1})
	if !echoed(a, 1, 5*time.Second) {
		t.Fatal("first client not served")
	}
	b := ts.dial(t)
	testutil.Eventually(t, 5*time.Second, "one queued", func() bool { return ts.Queued() == 1 })
	done := drainSoon(t, ts, 200*time.Millisecond)
	readReset(t, b, "waiting client at drain")
	if n := within(t, done, "drain"); n != 2 {
		t.Fatalf("drain reset %d connections, want 2 (one open, one waiting)", n)
	}
	if ts.Queued() != 0 {
		t.Fatalf("%d still queued after drain", ts.Queued())
	}
}

// TestUDPBackendCaps: with max_sessions 2 and 1 on two backends, three
// clients get sessions; the next new clients' datagrams are dropped and
// counted (backends_full, not no_backend) while established sessions go
// on; once sessions expire, a new client is served again.
func TestUDPBackendCaps(t *testing.T) {
	a, b := udpEcho(t, "a"), udpEcho(t, "b")
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: 2 * time.Second, MaxSessions: 100}, a, b)
	caps := []int64{2, 1}
	for i, c := range caps {
		ts.backends[i].SetMaxFlows(c)
	}
	var kept []*net.UDPConn
	for i := range 3 {
		c := dialUDP(t, ts.addr)
		if _, err := exchange(t, c, []byte("hello")); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		kept = append(kept, c)
	}
	for i := range 5 {
		c := dialUDP(t, ts.addr)
		c.Write([]byte("over"))
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var buf [64]byte
		if n, err := c.Read(buf[:]); err == nil {
			t.Fatalf("client %d past the caps got %q", 3+i, buf[:n])
		}
	}
	for i, bk := range ts.backends {
		if n := bk.LiveFlows(); n != caps[i] {
			t.Fatalf("backend %d: %d sessions, cap %d", i, n, caps[i])
		}
	}
	if full, none := ts.Stats.BackendsFull.Load(), ts.Stats.NoBackend.Load(); full != 5 || none != 0 {
		t.Fatalf("backends_full %d, no_backend %d; want 5, 0", full, none)
	}
	if _, err := exchange(t, kept[0], []byte("still")); err != nil {
		t.Fatalf("established session broken: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "sessions expired", func() bool { return ts.backends[0].LiveFlows()+ts.backends[1].LiveFlows() == 0 })
	if _, err := exchange(t, dialUDP(t, ts.addr), []byte("again")); err != nil {
		t.Fatalf("new client after expiry: %v", err)
	}
}

// TestQueueArrivalOrder: a client arriving while others wait queues
// behind them even when a slot is free (here: a cap raised with no
// wake-up yet), and its arrival serves the oldest waiter, not itself.
func TestQueueArrivalOrder(t *testing.T) {
	ts, srv := cappedService(t, Settings{QueueTimeout: waitBound, queuePoll: time.Hour}, 1)
	a := ts.dial(t)
	a.Write([]byte{0})
	if !echoed(a, 0, 5*time.Second) {
		t.Fatal("first client not served")
	}
	w := ts.dial(t)
	w.Write([]byte{1})
	testutil.Eventually(t, 5*time.Second, "one queued", func() bool { return ts.Queued() == 1 })
	ts.backends[0].SetMaxFlows(2) // room, and nobody told
	n := ts.dial(t)
	n.Write([]byte{2})
	if !echoed(w, 1, 5*time.Second) {
		t.Fatal("the waiter was not served when a newcomer found room")
	}
	if echoed(n, 2, 100*time.Millisecond) || ts.Queued() != 1 {
		t.Fatalf("the newcomer took a slot ahead of the queue (queued %d)", ts.Queued())
	}
	checkPeaks(t, srv, []int64{2})
}

// TestQueueAffinityFull: a client pinned (affinity_timeout) to a backend
// at its cap goes to another backend with room instead of past the cap.
func TestQueueAffinityFull(t *testing.T) {
	ts, srv := cappedService(t, Settings{QueueTimeout: waitBound, AffinityTimeout: time.Minute}, 1, 1)
	for i := range 2 {
		c := ts.dial(t)
		c.Write([]byte{byte(i)})
		if !echoed(c, byte(i), 5*time.Second) {
			t.Fatalf("client %d not served", i)
		}
	}
	checkPeaks(t, srv, []int64{1, 1})
	if srv[0].total.Load() != 1 || srv[1].total.Load() != 1 {
		t.Fatalf("backends saw %d and %d connections, want 1 each", srv[0].total.Load(), srv[1].total.Load())
	}
}

// TestQueueSNIRoutes: on a VIP with SNI routes a client waiting for a full
// route holds up neither a new client of the VIP's own backends (which
// have room) nor one queued behind it for them when their slot frees; it
// is served itself when the route's backend frees its slot.
func TestQueueSNIRoutes(t *testing.T) {
	rig := newSNIRig(t, 5*time.Second, NoRouteDefault)
	rig.ts.setBackends(t, startServer(t, echoHandler))
	rig.ts.Update(Settings{QueueTimeout: waitBound, queuePoll: time.Hour})
	rig.routes[0].Snapshots.Load().Members[0].Backend.SetMaxFlows(1) // route "api"
	a := rig.ts.dial(t)
	if got := hello(t, a, "api.example.com"); got != "api" {
		t.Fatalf("first api client reached %q", got)
	}
	b := rig.ts.dial(t)
	served := make(chan string, 1)
	go func() {
		tc := tls.Client(b, &tls.Config{ServerName: "api.example.com", InsecureSkipVerify: true})
		buf := make([]byte, 64)
		if tc.Handshake() != nil {
			served <- "handshake failed"
			return
		}
		n, _ := tc.Read(buf)
		served <- string(buf[:max(n-1, 0)])
	}()
	testutil.Eventually(t, 5*time.Second, "the second api client queued", func() bool { return rig.ts.Queued() == 1 })
	rig.ts.backends[0].SetMaxFlows(1) // the VIP's own backend: one client
	c := rig.ts.dial(t)
	c.Write([]byte{7})
	if !echoed(c, 7, 2*time.Second) {
		t.Fatal("a client of the VIP's own backends waited behind a full route")
	}
	d := rig.ts.dial(t)
	d.Write([]byte{8})
	testutil.Eventually(t, 5*time.Second, "a default client queued behind the api one", func() bool { return rig.ts.Queued() == 2 })
	c.Close() // a slot for d, whose waiter is second in line behind a full route's
	if !echoed(d, 8, 2*time.Second) {
		t.Fatal("a slot on the VIP's own backend did not reach its waiter behind a full route's")
	}
	a.Close()
	if got := within(t, served, "the queued api client"); got != "api" {
		t.Fatalf("queued api client: %q", got)
	}
}
