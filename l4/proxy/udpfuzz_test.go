// Fuzzing the UDP session path: random datagrams from a few clients through
// a real UDP VIP on the event loops to real backends on loopback.

package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/snapshot"
)

const (
	fuzzClients     = 12 // 3 source addresses x 4 source ports
	fuzzMaxSessions = 5  // below fuzzClients: the limit is reached
	fuzzMaxOps      = 24 // datagrams per input: bounds an input's time
	fuzzWait        = 3 * time.Second
)

// arrival is a datagram one of the fuzz backends received.
type arrival struct {
	be   int
	from netip.AddrPort // the session's socket
	data []byte
}

// udpFuzzNet is the fixture of FuzzUDPSessions, built once per fuzz
// process: a VIP with max_sessions = fuzzMaxSessions and udp_responses = 1
// (a reply ends its session, so an input ends every session it opened),
// three backends and fuzzClients client sockets.
type udpFuzzNet struct {
	svc      *UDPService
	vip      netip.AddrPort
	backends []*net.UDPConn
	bs       []*l4.Backend // the service's view of backends
	clients  []*net.UDPConn
	arrivals chan arrival
	loops    *Loops
	fds      int  // descriptors open with the fixture up and no session
	dirty    bool // the last input failed: its sessions may still be open
}

// udpModel is what the test expects the service to hold: the clients with
// a session, the backend and the session socket address of each.
type udpModel struct {
	open map[int]arrival // client -> the first datagram of its session
}

func (m *udpModel) live() int { return len(m.open) }

// FuzzUDPSessions feeds datagrams of random sizes (0..65507) and contents
// from 12 clients (3 addresses, 4 ports) through a UDP VIP to 3 backends,
// one by one or in concurrent bursts, and asserts: every datagram that
// reaches a backend is byte for byte what its client sent; a client's
// datagrams keep one session (one socket, one backend) while it lives;
// a reply reaches the client of its session and no other; a new client
// is refused exactly when max_sessions sessions are live, and the count
// never exceeds it; at the end of every input no session, live flow or
// descriptor is left; after the service closes, no goroutine or
// descriptor is left.
//
// Input: ops, 4 bytes per datagram: client (mod 12), size (16 bits, mod
// 65508; mod 64 when flag 8 is set), flags (1: the backend replies, 2:
// sent in a burst with its burst neighbours, without waiting: 4..1024
// bytes, the first 4 naming the datagram); fill: the bytes the datagrams
// are cut from.
func FuzzUDPSessions(f *testing.F) {
	f.Add([]byte{0, 0, 10, 1, 1, 0, 20, 0, 1, 0, 30, 1}, []byte("hello"))
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 1, 2, 0, 0, 8}, []byte{})
	// 65507 bytes, the largest UDP payload over IPv4
	f.Add([]byte{0, 0xff, 0xe3, 1, 5, 0xff, 0xe3, 0}, []byte{0xaa, 0x55})
	// 7 clients one by one: past the limit
	f.Add([]byte{0, 0, 1, 0, 1, 0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 0, 4, 0, 1, 0, 5, 0, 1, 0, 6, 0, 1, 0}, []byte{})
	// 12 new clients at once against a limit of 5
	f.Add(burstOps(), []byte("burst"))
	fx := newUDPFuzzNet(f)
	f.Fuzz(func(t *testing.T, ops, fill []byte) {
		fx.run(t, ops, fill)
	})
}

// burstOps: the first datagrams of every client at once.
func burstOps() []byte {
	var ops []byte
	for c := range fuzzClients {
		ops = append(ops, byte(c), 0, byte(8+c), 2)
	}
	return ops
}

// TestUDPMaxSessionsBurst repeats FuzzUDPSessions' burst seed: new
// clients on both loops race for the last sessions, and max_sessions
// holds every time (with a check and a later add, 6 of 5 came through
// within a few rounds).
func TestUDPMaxSessionsBurst(t *testing.T) {
	fx := newUDPFuzzNet(t)
	for i := 0; i < 100 && !t.Failed(); i++ {
		fx.run(t, burstOps(), []byte("burst"))
	}
}

func newUDPFuzzNet(f testing.TB) *udpFuzzNet {
	f.Helper()
	// The runtime's poller descriptors open with the first socket: open
	// one before counting.
	if c, err := net.ListenPacket("udp4", "127.0.0.1:0"); err == nil {
		c.Close()
	}
	fds0, g0 := countFDs(f), runtime.NumGoroutine()
	fx := &udpFuzzNet{arrivals: make(chan arrival, 4*fuzzMaxOps)}
	for i := range 3 {
		c := listenUDP4(f, "127.0.0.1:0")
		fx.backends = append(fx.backends, c)
		go fx.serveBackend(i, c)
	}
	for i := range fuzzClients {
		fx.clients = append(fx.clients, listenUDP4(f, fmt.Sprintf("127.0.0.%d:0", 1+i%3)))
	}
	if err := fx.start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		fx.openSessions(f, 3) // Close must end live sessions too
		fx.stop(f)
		for _, c := range append(fx.backends, fx.clients...) {
			c.Close()
		}
		// While fuzzing, the engine's own goroutines come and go.
		fuzzing := flag.Lookup("test.fuzz").Value.String() != ""
		if !eventually(func() bool { return countFDs(f) <= fds0 && (fuzzing || runtime.NumGoroutine() <= g0) }) {
			f.Errorf("after close: %d descriptors (before: %d), %d goroutines (before: %d)",
				countFDs(f), fds0, runtime.NumGoroutine(), g0)
		}
	})
	return fx
}

// start makes the event loops and the service over the backends.
func (fx *udpFuzzNet) start() error {
	loops, err := NewLoops(2, NewPipePool(0))
	if err != nil {
		return err
	}
	conn, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), ListenOptions{ReusePort: true})
	if err != nil {
		loops.Close()
		return err
	}
	var ms []balance.Member
	fx.bs = nil
	for i, c := range fx.backends {
		b := l4.NewBackend(l4.BackendID(fmt.Sprintf("b%d", i)), c.LocalAddr().(*net.UDPAddr).AddrPort(), nil)
		fx.bs = append(fx.bs, b)
		ms = append(ms, balance.Member{Backend: b, Weight: 1})
	}
	snap, err := snapshot.Build(balance.Options{}, ms)
	if err != nil {
		conn.Close()
		loops.Close()
		return err
	}
	store := &snapshot.Store{}
	store.Store(snap)
	fx.svc, err = NewUDPService(UDPConfig{Conn: conn, Snapshots: store, Loops: loops,
		Settings: UDPSettings{Name: "fuzz", SessionTimeout: time.Minute, MaxSessions: fuzzMaxSessions, Responses: 1}})
	if err != nil {
		conn.Close()
		loops.Close()
		return err
	}
	fx.loops, fx.vip = loops, conn.LocalAddr().(*net.UDPAddr).AddrPort()
	go fx.svc.Serve()
	fx.fds = countFDs(nil)
	return nil
}

// stop closes the service and checks that it left no session or flow.
func (fx *udpFuzzNet) stop(tb testing.TB) {
	fx.svc.Close()
	fx.loops.Close()
	if n := fx.svc.Sessions(); n != 0 {
		tb.Errorf("%d sessions after close", n)
	}
	for _, b := range fx.bs {
		if b.LiveFlows() != 0 || b.Underflows() != 0 {
			tb.Errorf("backend %s: %d live flows, %d underflows after close", b.ID, b.LiveFlows(), b.Underflows())
		}
	}
}

// openSessions starts a session for each of the first n clients.
func (fx *udpFuzzNet) openSessions(tb testing.TB, n int) {
	for c := range n {
		if _, err := fx.clients[c].WriteToUDPAddrPort([]byte("open"), fx.vip); err != nil {
			tb.Errorf("client %d: %v", c, err)
		}
	}
	for range n {
		select {
		case <-fx.arrivals:
		case <-time.After(fuzzWait):
			tb.Errorf("datagram lost; stats %s", fx.stats())
			return
		}
	}
	if got := fx.svc.Sessions(); got != int64(n) {
		tb.Errorf("%d sessions, want %d", got, n)
	}
}

// restart replaces a service that a failed input left in an unknown
// state, so that the engine's minimisation of a failing input runs each
// candidate against a clean service.
func (fx *udpFuzzNet) restart(t *testing.T) {
	fx.stop(t)
	buf := make([]byte, maxDatagram+1)
	for _, c := range fx.clients {
		for c.SetReadDeadline(time.Now()) == nil {
			if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
				break
			}
		}
	}
	for len(fx.arrivals) > 0 {
		<-fx.arrivals
	}
	if err := fx.start(); err != nil {
		t.Fatal(err)
	}
}

func listenUDP4(tb testing.TB, addr string) *net.UDPConn {
	tb.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// serveBackend passes what backend i receives to the test, which replies
// itself (from the same socket) when the input says so.
func (fx *udpFuzzNet) serveBackend(i int, c *net.UDPConn) {
	buf := make([]byte, maxDatagram+1)
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		fx.arrivals <- arrival{be: i, from: from, data: bytes.Clone(buf[:n])}
	}
}

// fuzzOp is one datagram of an input.
type fuzzOp struct {
	client int
	data   []byte
	reply  bool
	burst  bool
}

func parseOps(ops, fill []byte) []fuzzOp {
	var out []fuzzOp
	for i := 0; i+4 <= len(ops) && len(out) < fuzzMaxOps; i += 4 {
		size := int(binary.BigEndian.Uint16(ops[i+1:])) % (maxDatagram + 1)
		if ops[i+3]&8 != 0 {
			size %= 64
		}
		data := make([]byte, size)
		for j := range data {
			if len(fill) > 0 {
				data[j] = fill[(j+i)%len(fill)] ^ byte(j>>8)
			} else {
				data[j] = byte(j*31 + i)
			}
		}
		op := fuzzOp{client: int(ops[i]) % fuzzClients, data: data, reply: ops[i+3]&1 != 0, burst: ops[i+3]&2 != 0}
		if op.burst { // a burst must fit the socket buffers: no loss
			op.data = op.data[:min(len(op.data), 1024)]
			if len(op.data) < 4 {
				op.data = append(op.data, make([]byte, 4-len(op.data))...)
			}
		}
		out = append(out, op)
	}
	return out
}

func (fx *udpFuzzNet) run(t *testing.T, ops, fill []byte) {
	if fx.dirty {
		fx.restart(t)
	}
	fx.dirty = true
	defer func() { fx.dirty = t.Failed() }()
	m := &udpModel{open: map[int]arrival{}}
	list := parseOps(ops, fill)
	for i := 0; i < len(list); {
		if !list[i].burst {
			fx.single(t, m, list[i])
			i++
			continue
		}
		j := i
		for j < len(list) && list[j].burst {
			j++
		}
		fx.burst(t, m, list[i:j])
		i = j
	}
	fx.closeAll(t, m)
}

// single sends one datagram and checks its fate against the model.
func (fx *udpFuzzNet) single(t *testing.T, m *udpModel, op fuzzOp) {
	t.Helper()
	refused := fx.svc.Stats.SessionsRefused.Load()
	fx.send(t, op)
	_, known := m.open[op.client]
	if !known && m.live() >= fuzzMaxSessions {
		if !eventually(func() bool { return fx.svc.Stats.SessionsRefused.Load() == refused+1 }) {
			t.Fatalf("client %d (a new client at the limit): datagram not refused; stats %s", op.client, fx.stats())
		}
		return
	}
	a := fx.arrival(t)
	if !bytes.Equal(a.data, op.data) {
		t.Fatalf("backend %d got %d bytes, client %d sent %d: not the same bytes", a.be, len(a.data), op.client, len(op.data))
	}
	fx.place(t, m, op.client, a)
	fx.checkCount(t, m)
	if op.reply {
		fx.reply(t, m, op.client, a.data)
	}
}

// burst sends ops without waiting, then collects every outcome: with two
// loops, new clients race for the last sessions.
func (fx *udpFuzzNet) burst(t *testing.T, m *udpModel, ops []fuzzOp) {
	t.Helper()
	refused := fx.svc.Stats.SessionsRefused.Load()
	for k := range ops {
		binary.BigEndian.PutUint32(ops[k].data, 0xb0000000|uint32(k)) // names the op in what arrives
		fx.send(t, ops[k])
	}
	var got []arrival
	deadline := time.Now().Add(fuzzWait)
	for len(got)+int(fx.svc.Stats.SessionsRefused.Load()-refused) < len(ops) {
		select {
		case a := <-fx.arrivals:
			got = append(got, a)
		case <-time.After(time.Until(deadline)):
			t.Fatalf("burst of %d: %d arrived, %d refused; stats %s", len(ops), len(got),
				fx.svc.Stats.SessionsRefused.Load()-refused, fx.stats())
		case <-time.After(time.Millisecond):
		}
	}
	for _, a := range got {
		k := int(binary.BigEndian.Uint32(a.data) &^ 0xb0000000)
		if len(a.data) < 4 || k >= len(ops) || !bytes.Equal(a.data, ops[k].data) {
			t.Fatalf("backend %d got %d bytes that no client of the burst sent", a.be, len(a.data))
		}
		fx.place(t, m, ops[k].client, a)
	}
	if m.live() > fuzzMaxSessions {
		t.Fatalf("%d sessions after a burst, max_sessions %d", m.live(), fuzzMaxSessions)
	}
	if n := fx.svc.Stats.SessionsRefused.Load() - refused; n > 0 && m.live() < fuzzMaxSessions {
		t.Fatalf("%d datagrams refused with %d of %d sessions live", n, m.live(), fuzzMaxSessions)
	}
	fx.checkCount(t, m)
}

// place records where client's datagram a arrived: a live session keeps
// its socket and backend; a new one has a socket no other session has.
func (fx *udpFuzzNet) place(t *testing.T, m *udpModel, client int, a arrival) {
	t.Helper()
	if first, ok := m.open[client]; ok {
		if first.be != a.be || first.from != a.from {
			t.Fatalf("client %d: session on backend %d from %v, this datagram reached backend %d from %v",
				client, first.be, first.from, a.be, a.from)
		}
		return
	}
	for c, other := range m.open {
		if other.be == a.be && other.from == a.from {
			t.Fatalf("clients %d and %d share the session socket %v", c, client, a.from)
		}
	}
	m.open[client] = a
}

// reply sends data from client's session backend to its socket; the
// client must get it, and the session ends (udp_responses = 1).
func (fx *udpFuzzNet) reply(t *testing.T, m *udpModel, client int, data []byte) {
	t.Helper()
	s := m.open[client]
	if _, err := fx.backends[s.be].WriteToUDPAddrPort(data, s.from); err != nil {
		t.Fatalf("backend %d reply: %v", s.be, err)
	}
	c := fx.clients[client]
	buf := make([]byte, maxDatagram+1)
	c.SetReadDeadline(time.Now().Add(fuzzWait))
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("client %d: no reply: %v; stats %s", client, err, fx.stats())
	}
	if from != fx.vip || !bytes.Equal(buf[:n], data) {
		t.Fatalf("client %d: %d bytes from %v, want the %d bytes its backend sent from %v", client, n, from, len(data), fx.vip)
	}
	delete(m.open, client)
	fx.checkCount(t, m)
}

// closeAll ends every session the input left (a reply each) and checks
// that nothing is left over: no session, live flow, stray datagram or
// descriptor.
func (fx *udpFuzzNet) closeAll(t *testing.T, m *udpModel) {
	t.Helper()
	for client := range m.open {
		fx.reply(t, m, client, []byte("bye"))
	}
	for _, b := range fx.bs {
		if b.LiveFlows() != 0 {
			t.Fatalf("backend %s: %d live flows with no session", b.ID, b.LiveFlows())
		}
	}
	select {
	case a := <-fx.arrivals:
		t.Fatalf("stray datagram at backend %d: %d bytes", a.be, len(a.data))
	default:
	}
	buf := make([]byte, maxDatagram+1)
	for i, c := range fx.clients {
		c.SetReadDeadline(time.Now())
		if n, _, err := c.ReadFromUDPAddrPort(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("client %d: stray datagram (%d bytes, %v)", i, n, err)
		}
	}
	if !eventually(func() bool { return countFDs(t) == fx.fds }) {
		t.Fatalf("%d descriptors open, %d with no session", countFDs(t), fx.fds)
	}
}

func (fx *udpFuzzNet) send(t *testing.T, op fuzzOp) {
	t.Helper()
	if _, err := fx.clients[op.client].WriteToUDPAddrPort(op.data, fx.vip); err != nil {
		t.Fatalf("client %d: send %d bytes: %v", op.client, len(op.data), err)
	}
}

func (fx *udpFuzzNet) arrival(t *testing.T) arrival {
	t.Helper()
	select {
	case a := <-fx.arrivals:
		return a
	case <-time.After(fuzzWait):
		t.Fatalf("datagram lost; stats %s", fx.stats())
	}
	return arrival{}
}

// checkCount: the service counts the model's sessions, never more than
// max_sessions.
func (fx *udpFuzzNet) checkCount(t *testing.T, m *udpModel) {
	t.Helper()
	if !eventually(func() bool { return fx.svc.Sessions() == int64(m.live()) }) {
		t.Fatalf("service counts %d sessions, want %d", fx.svc.Sessions(), m.live())
	}
	if n := fx.svc.Sessions(); n > fuzzMaxSessions {
		t.Fatalf("%d sessions, max_sessions %d", n, fuzzMaxSessions)
	}
}

func (fx *udpFuzzNet) stats() string {
	s := &fx.svc.Stats
	return fmt.Sprintf("datagrams %d replies %d created %d refused %d dropped %d nobackend %d truncated %d read errors %d sessions %d",
		s.Datagrams.Load(), s.Replies.Load(), s.SessionsCreated.Load(), s.SessionsRefused.Load(), s.Dropped.Load(),
		s.NoBackend.Load(), s.Truncated.Load(), s.ReadErrors.Load(), fx.svc.Sessions())
}

// eventually polls cond for up to fuzzWait.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(fuzzWait); ; time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// countFDs counts this process's open descriptors (-1 when unreadable).
func countFDs(testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
