package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// udpEcho runs a loopback UDP echo server that prefixes replies with name.
func udpEcho(t testing.TB, name string) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 70000)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte(name+":"), buf[:n]...), from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

type udpTestService struct {
	*UDPService
	addr     netip.AddrPort
	backends []*l4.Backend
	store    *snapshot.Store
}

func newUDPService(t testing.TB, listen string, st UDPSettings, addrs ...netip.AddrPort) *udpTestService {
	t.Helper()
	return newUDPServiceLog(t, listen, nil, st, addrs...)
}

// newUDPServiceLog is newUDPService with a logger (nil = none).
func newUDPServiceLog(t testing.TB, listen string, log *zap.Logger, st UDPSettings, addrs ...netip.AddrPort) *udpTestService {
	t.Helper()
	return newUDPServiceWith(t, listen, func(c *UDPConfig) { c.Log = log }, st, addrs...)
}

// newUDPServiceWith is newUDPService with its config changed by mod.
func newUDPServiceWith(t testing.TB, listen string, mod func(*UDPConfig), st UDPSettings, addrs ...netip.AddrPort) *udpTestService {
	t.Helper()
	loops := testLoops(t, NewPipePool(0))
	conn, err := ListenUDP(netip.MustParseAddrPort(listen), ListenOptions{ReusePort: loops != nil})
	if err != nil {
		t.Fatal(err)
	}
	store := &snapshot.Store{}
	ts := &udpTestService{backends: equalBackends(t, store, addrs), store: store}
	cfg := UDPConfig{Conn: conn, Snapshots: store, Settings: st, Loops: loops}
	mod(&cfg)
	if ts.UDPService, err = NewUDPService(cfg); err != nil {
		t.Fatal(err)
	}
	ts.addr = conn.LocalAddr().(*net.UDPAddr).AddrPort()
	go ts.Serve()
	t.Cleanup(func() {
		ts.Close()
		for _, b := range ts.backends {
			if b.LiveFlows() != 0 || b.Underflows() != 0 {
				t.Errorf("backend %s: %d live flows, %d underflows after close", b.ID, b.LiveFlows(), b.Underflows())
			}
		}
	})
	return ts
}

// exchange sends msg on c and returns the reply.
func exchange(t testing.TB, c *net.UDPConn, msg []byte) ([]byte, error) {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	buf := make([]byte, 70000)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func dialUDP(t testing.TB, to netip.AddrPort) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestUDPSessionsSpreadAndExpire(t *testing.T) {
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: 2 * time.Second},
		udpEcho(t, "a"), udpEcho(t, "b"), udpEcho(t, "c"))
	const clients = 90
	seen := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialUDP(t, ts.addr)
			for j := 0; j < 3; j++ { // one session, several datagrams
				got, err := exchange(t, c, []byte(fmt.Sprintf("client %d msg %d", i, j)))
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				name, body, _ := bytes.Cut(got, []byte(":"))
				if string(body) != fmt.Sprintf("client %d msg %d", i, j) {
					t.Errorf("client %d got %q", i, got)
				}
				if j == 0 {
					mu.Lock()
					seen[string(name)]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if got := ts.Stats.SessionsCreated.Load(); got != clients {
		t.Fatalf("%d sessions created, want %d", got, clients)
	}
	for _, n := range []string{"a", "b", "c"} {
		if seen[n] != clients/3 {
			t.Fatalf("round robin spread %v", seen)
		}
	}
	testutil.Eventually(t, 8*time.Second, "sessions to expire", func() bool { return ts.Sessions() == 0 })
	for _, b := range ts.backends {
		if b.LiveFlows() != 0 {
			t.Fatalf("backend %s keeps %d live flows after expiry", b.ID, b.LiveFlows())
		}
	}
}

func TestUDPResponsesEndsSession(t *testing.T) {
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Minute, Responses: 1}, udpEcho(t, "dns"))
	c := dialUDP(t, ts.addr)
	for i := 0; i < 3; i++ {
		if _, err := exchange(t, c, []byte("query")); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 2*time.Second, "session closed after its reply", func() bool { return ts.Sessions() == 0 })
	}
	if got := ts.Stats.SessionsCreated.Load(); got != 3 {
		t.Fatalf("%d sessions created for 3 exchanges, want 3", got)
	}
}

// TestUDPSessionMovesOffDownBackend: the runtime marks a backend
// ineligible and publishes a snapshot without it; the next datagram of a
// session on it ends that session and starts one on a live backend. The
// algorithm is source_hash, which would keep the client on its backend:
// only the eligibility check can move it (round robin would pick the
// other backend for any new session anyway).
func TestUDPSessionMovesOffDownBackend(t *testing.T) {
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Minute}, udpEcho(t, "a"), udpEcho(t, "b"))
	hashed := balance.Options{Algorithm: l4.SourceHash, HashKey: l4.HashSrcIP}
	publish := func(bs ...*l4.Backend) {
		t.Helper()
		var ms []balance.Member
		for _, b := range bs {
			ms = append(ms, balance.Member{Backend: b, Weight: 1})
		}
		snap, err := snapshot.Build(hashed, ms)
		if err != nil {
			t.Fatal(err)
		}
		ts.store.Store(snap)
	}
	publish(ts.backends...)
	c := dialUDP(t, ts.addr)
	got, err := exchange(t, c, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	first := string(got[:1])
	for range 3 { // the hash keeps the client there
		if got, err = exchange(t, c, []byte("x")); err != nil || string(got[:1]) != first {
			t.Fatalf("reply %q, %v; want it from %s again", got, err, first)
		}
	}
	down, live := ts.backends[0], ts.backends[1]
	if first == "b" {
		down, live = live, down
	}
	down.SetEligible(false)
	publish(live)
	if got, err = exchange(t, c, []byte("y")); err != nil || string(got[:1]) == first {
		t.Fatalf("reply %q, %v: the session stayed on down backend %s", got, err, first)
	}
	if n := ts.Stats.Moved.Load(); n != 1 {
		t.Fatalf("%d moves counted, want 1", n)
	}
}

func TestUDPMaxSessionsAndOversize(t *testing.T) {
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Minute, MaxSessions: 5}, udpEcho(t, "a"))
	var kept []*net.UDPConn
	for i := 0; i < 5; i++ {
		c := dialUDP(t, ts.addr)
		if _, err := exchange(t, c, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, c)
	}
	for i := 0; i < 50; i++ { // a flood of new clients past the limit
		c := dialUDP(t, ts.addr)
		c.Write([]byte("flood"))
	}
	testutil.Eventually(t, 2*time.Second, "refusals counted", func() bool { return ts.Stats.SessionsRefused.Load() == 50 })
	big := bytes.Repeat([]byte{0xA5}, maxDatagram-2) // with the "a:" prefix the reply is the UDP maximum
	for _, c := range kept {
		got, err := exchange(t, c, big)
		if err != nil || !bytes.Equal(got[2:], big) {
			t.Fatalf("existing session broken by the flood: %d bytes, %v", len(got), err)
		}
	}
	if ts.Sessions() != 5 {
		t.Fatalf("%d sessions", ts.Sessions())
	}
}

// TestUDPWildcardRepliesFromVIP: a VIP on 0.0.0.0 answers from the address
// the client sent to; a connected client socket drops anything else.
func TestUDPWildcardRepliesFromVIP(t *testing.T) {
	ts := newUDPService(t, "0.0.0.0:0", UDPSettings{SessionTimeout: time.Minute}, udpEcho(t, "a"))
	for _, ip := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		c := dialUDP(t, netip.AddrPortFrom(netip.MustParseAddr(ip), ts.addr.Port()))
		if _, err := exchange(t, c, []byte("hi")); err != nil {
			t.Fatalf("via %s: %v", ip, err)
		}
	}
}

// serviceToSink runs a UDP VIP whose one backend never reads (and so never
// answers or allocates: allocation counts are the forwarder's alone), and
// a client connected to the VIP.
func serviceToSink(t *testing.T) (*udpTestService, *net.UDPConn) {
	t.Helper()
	sink, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Minute}, sink.LocalAddr().(*net.UDPAddr).AddrPort())
	return ts, dialUDP(t, ts.addr)
}

func TestUDPForwardAllocatesNothing(t *testing.T) {
	ts, c := serviceToSink(t)
	c.Write([]byte("open a session"))
	// Datagrams is counted after the forward that sent it: waiting for it
	// orders the loop's session writes before this test's.
	testutil.Eventually(t, 2*time.Second, "session", func() bool { return ts.Stats.Datagrams.Load() == 1 })
	flow := l4.Flow{Src: c.LocalAddr().(*net.UDPAddr).AddrPort(), Dst: ts.addr, Proto: l4.UDP}
	key := conntrack.KeyOf(&flow)
	payload := []byte("datagram")
	// On the loops: the session lookup and the send (the loop thread
	// leaves an idle session alone).
	if ts.loopSession(key) == nil {
		t.Fatal("no session")
	}
	if n := testing.AllocsPerRun(1000, func() { writeRetry(ts.loopSession(key).reg.fd, payload) }); n != 0 {
		t.Fatalf("%v allocations per forwarded datagram", n)
	}
}

// TestUDPGarbageIsForwardedFaithfully: a VIP carries any payload, empty
// and binary included, byte for byte; nothing crashes and the counters add
// up.
func TestUDPGarbageIsForwardedFaithfully(t *testing.T) {
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Minute}, udpEcho(t, "e"))
	c := dialUDP(t, ts.addr)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 7, 512, 1472, 9000, 65000}
	for _, n := range sizes {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		got, err := exchange(t, c, p)
		if err != nil {
			t.Fatalf("%d-byte datagram: %v", n, err)
		}
		if !bytes.Equal(got[2:], p) {
			t.Fatalf("%d-byte datagram came back as %d bytes, or changed", n, len(got)-2)
		}
	}
	if got := ts.Stats.Datagrams.Load(); got != uint64(len(sizes)) {
		t.Fatalf("Datagrams = %d, want %d", got, len(sizes))
	}
	if ts.Stats.Truncated.Load() != 0 || ts.Stats.Dropped.Load() != 0 {
		t.Fatalf("truncated %d, dropped %d", ts.Stats.Truncated.Load(), ts.Stats.Dropped.Load())
	}
}

// TestUDPServeAllocatesNothingPerDatagram counts the whole process's heap
// allocations while datagrams of an existing session go through Serve
// (batch read, flow key, session lookup, send): the AllocsPerRun test
// above cannot see the read loop, which runs on its own goroutine.
func TestUDPServeAllocatesNothingPerDatagram(t *testing.T) {
	ts, c := serviceToSink(t)
	payload := []byte("datagram")
	c.Write(payload)
	testutil.Eventually(t, 2*time.Second, "session", func() bool { return ts.Stats.Datagrams.Load() == 1 })
	const n = 5000
	// sent counts datagrams written; lost, those not forwarded by the end
	// of a wait (dropped by the kernel, or late: a busy machine). Each wait
	// is bounded, so that a lost datagram costs two seconds, not the
	// suite's timeout; it allocates nothing.
	sent, lost := uint64(1), uint64(0)
	caughtUp := func() {
		deadline := time.Now().Add(2 * time.Second)
		for ts.Stats.Datagrams.Load()+lost < sent {
			if time.Now().After(deadline) {
				lost = sent - ts.Stats.Datagrams.Load()
				return
			}
			runtime.Gosched()
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
		sent++
		if i%64 == 63 { // stay below the socket buffers: no drops
			caughtUp()
			if lost > n/10 {
				t.Fatalf("%d of %d datagrams not forwarded", lost, sent)
			}
		}
	}
	caughtUp()
	runtime.ReadMemStats(&after)
	lost = 0
	caughtUp() // late ones count as forwarded
	if lost > n/100 {
		t.Fatalf("%d of %d datagrams never reached the service", lost, n)
	}
	// A few allocations may come from the runtime or the table's sweeper;
	// one per datagram would be 5000.
	if got := after.Mallocs - before.Mallocs; got > n/100 {
		t.Fatalf("%d allocations for %d datagrams", got, n)
	}
}

// A reload's shorter session_timeout ends sessions that started before it.
func TestUDPSessionTimeoutChangeApplies(t *testing.T) {
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Hour}, udpEcho(t, "a"))
	c := dialUDP(t, ts.addr)
	if _, err := exchange(t, c, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if ts.Sessions() != 1 {
		t.Fatalf("%d sessions", ts.Sessions())
	}
	if err := ts.Update(UDPSettings{SessionTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the established session to end at the new 1s timeout", func() bool { return ts.Sessions() == 0 })
}

// TestUDPOnEveryLoop: a VIP's flows spread over its loops' sockets (the
// kernel hashes each to one socket of the SO_REUSEPORT group), every one
// answered; also on an IPv6 VIP, whose group members must copy
// IPV6_V6ONLY to bind beside the first.
func TestUDPOnEveryLoop(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(listen, func(t *testing.T) {
			ts := newUDPService(t, listen, UDPSettings{SessionTimeout: time.Minute}, udpEcho(t, "a"))
			if len(ts.ev.socks) < 2 {
				t.Fatalf("%d sockets for %d loops", len(ts.ev.socks), ts.ev.loops.Len())
			}
			network := "udp4"
			if ts.addr.Addr().Is6() {
				network = "udp6"
			}
			for i := range 32 {
				c, err := net.DialUDP(network, nil, net.UDPAddrFromAddrPort(ts.addr))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := exchange(t, c, []byte{byte(i)}); err != nil {
					t.Fatalf("flow %d: %v", i, err)
				}
			}
			busy := 0
			for _, n := range ts.ev.loops.Sessions() {
				if n > 0 {
					busy++
				}
			}
			if busy < 2 {
				t.Fatalf("32 flows' sessions on %v loops: the group does not spread them", ts.ev.loops.Sessions())
			}
		})
	}
}

// TestUDPMaxSessionsRaisedByReloadEvictsNone: a reload that raises
// max_sessions past what the session table was sized for at start grows
// the table, so sessions under the new limit are never evicted. The
// table's floor is lowered so that a few hundred real sessions (each a
// socket) reach the start size: 100 sessions size it at 200; the reload
// allows 1000 and 600 clients open sessions, all live, all answered.
func TestUDPMaxSessionsRaisedByReloadEvictsNone(t *testing.T) {
	st := UDPSettings{SessionTimeout: time.Minute, MaxSessions: 100}
	ts := newUDPServiceWith(t, "127.0.0.1:0", func(c *UDPConfig) { c.tableMin = 64 }, st, udpEcho(t, "a"))
	if got := ts.Table().MaxEntries(); got != 200 {
		t.Fatalf("session table of %d for max_sessions 100, want 200", got)
	}
	st.MaxSessions = 1000
	if err := ts.Update(st); err != nil {
		t.Fatal(err)
	}
	const clients = 600
	conns := make([]*net.UDPConn, clients)
	for i := range conns {
		conns[i] = dialUDP(t, ts.addr)
		if _, err := exchange(t, conns[i], []byte("hello")); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	if n, ev := ts.Sessions(), ts.Table().Stats().Evicted; n != clients || ev != 0 {
		t.Fatalf("%d sessions live, %d evicted after %d clients under max_sessions 1000", n, ev, clients)
	}
	for i, c := range conns { // every session is still the one it was: a second exchange creates none
		if _, err := exchange(t, c, []byte("again")); err != nil {
			t.Fatalf("client %d, second datagram: %v", i, err)
		}
	}
	if n := ts.Stats.SessionsCreated.Load(); n != clients {
		t.Fatalf("%d sessions created for %d clients: some were evicted and started again", n, clients)
	}
}
