package proxy

import (
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// startupPacket is a protocol 3.0 StartupMessage of the pairs given.
func startupPacket(kv ...string) []byte {
	var body []byte
	for _, s := range kv {
		body = append(append(body, s...), 0)
	}
	body = append(body, 0)
	out := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	out = binary.BigEndian.AppendUint32(out, 196608)
	return append(out, body...)
}

// requestPacket is an SSLRequest (80877103), GSSENCRequest (80877104)
// or CancelRequest (80877102, with a PID and key).
func requestPacket(code uint32) []byte {
	n := 8
	if code == 80877102 {
		n = 16
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(n))
	out = binary.BigEndian.AppendUint32(out, code)
	return append(out, make([]byte, n-8)...)
}

// packetPool is a backend that reads one length-prefixed packet and
// answers its label, a newline and the packet's bytes as it got them; it
// counts its connections.
func packetPool(t *testing.T, label string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	addr := startServer(t, func(c *net.TCPConn) {
		conns.Add(1)
		var n [4]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		rest := make([]byte, binary.BigEndian.Uint32(n[:])-4)
		if _, err := io.ReadFull(c, rest); err != nil {
			return
		}
		c.Write(append(append([]byte(label+"\n"), n[:]...), rest...))
	})
	return addr, &conns
}

// startupRig is a postgres VIP whose own backend is the packet pool
// "default", with routes by database, by database and user, by a prefix,
// and by server name (a TLS pool).
type startupRig struct {
	ts     *testService
	routes []*Route
	conns  map[string]*atomic.Int64
}

func newStartupRig(t *testing.T, noMatch NoRoute) *startupRig {
	t.Helper()
	rig := &startupRig{conns: map[string]*atomic.Int64{}}
	def, n := packetPool(t, "default")
	rig.conns["default"] = n
	rig.ts = newService(t, Settings{}, def)
	type spec struct {
		label             string
		names, dbs, users []string
	}
	specs := []spec{
		{label: "a", dbs: []string{"a"}},
		{label: "report", dbs: []string{"app"}, users: []string{"report", "bi_*"}},
		{label: "tenants", dbs: []string{"tenant_*"}},
		{label: "b", dbs: []string{"b", "app"}},
		{label: "direct", names: []string{"db.example.com"}},
	}
	cert, _ := testutil.SelfSignedTLS(t, "db.example.com")
	var names, dbs, users [][]string
	for _, s := range specs {
		addr, n := packetPool(t, s.label)
		if s.label == "direct" {
			addr, n = tlsPool(t, cert, s.label)
		}
		rig.conns[s.label] = n
		r := &Route{Name: s.label, Snapshots: &snapshot.Store{}}
		equalBackends(t, r.Snapshots, []netip.AddrPort{addr})
		rig.routes = append(rig.routes, r)
		names, dbs, users = append(names, s.names), append(dbs, s.dbs), append(users, s.users)
	}
	rt, err := NewRoutes(rig.routes, names, 5*time.Second, noMatch)
	if err != nil {
		t.Fatal(err)
	}
	rig.ts.SetRoutes(rt.WithStartup(rig.routes, dbs, users))
	return rig
}

// send writes packet through the VIP and returns the label of the pool
// that answered, having checked that the pool got packet unchanged.
func (rig *startupRig) send(t *testing.T, packet []byte) string {
	t.Helper()
	c := rig.ts.dial(t)
	if _, err := c.Write(packet); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the pool's answer: %v", err)
	}
	label, got, ok := cut(b)
	if !ok || string(got) != string(packet) {
		t.Fatalf("pool %q got %q, want the client's %q", label, got, packet)
	}
	return label
}

func cut(b []byte) (string, []byte, bool) {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i]), b[i+1:], true
		}
	}
	return string(b), nil, false
}

// TestStartupRoutes: StartupMessages reach the first route whose
// database and user lists take them, byte for byte; a startup without a
// database routes by its user's name; SSLRequest, GSSENCRequest,
// CancelRequest and unlisted databases go to the VIP's own backend; a
// client opening TLS at once (sslnegotiation=direct, ALPN postgresql)
// routes by its server name. Each is counted.
func TestStartupRoutes(t *testing.T) {
	rig := newStartupRig(t, NoRouteDefault)
	for _, c := range []struct {
		packet []byte
		pool   string
	}{
		{startupPacket("user", "alice", "database", "a"), "a"},
		{startupPacket("database", "app", "user", "report", "application_name", "psql"), "report"},
		{startupPacket("database", "app", "user", "bi_nightly"), "report"},
		{startupPacket("database", "app", "user", "alice"), "b"},
		{startupPacket("user", "x", "database", "tenant_42"), "tenants"},
		{startupPacket("user", "a"), "a"}, // no database: the user's
		{startupPacket("user", "x", "database", "A"), "default"},
		{startupPacket("user", "x", "database", "tenant"), "default"},
		{requestPacket(80877103), "default"},
		{requestPacket(80877104), "default"},
		{requestPacket(80877102), "default"},
	} {
		if got := rig.send(t, c.packet); got != c.pool {
			t.Errorf("%q reached pool %q, want %q", c.packet, got, c.pool)
		}
	}
	tc := tls.Client(rig.ts.dial(t), &tls.Config{ServerName: "db.example.com", NextProtos: []string{"postgresql"}, InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("direct TLS through the VIP: %v", err)
	}
	if b := make([]byte, 7); func() bool { n, _ := io.ReadFull(tc, b); return string(b[:n]) != "direct\n" }() {
		t.Fatalf("direct TLS reached pool %q, want direct", b)
	}
	st := &rig.ts.Stats
	got := [...]uint64{st.Startup.Routed.Load(), st.Startup.NoMatch.Load(), st.Startup.Encrypted.Load(), st.Startup.Cancels.Load(),
		st.Startup.Malformed.Load(), st.SNIDefault.Load(), rig.routes[4].Routed.Load()}
	if got != [...]uint64{6, 2, 2, 1, 0, 5, 1} {
		t.Errorf("routed, no match, ssl/gss, cancels, malformed, default, direct: %v, want [6 2 2 1 0 5 1]", got)
	}
}

// TestStartupMalformed: a first packet PostgreSQL would refuse (protocol
// 2, HTTP, a length over 10000, a bad parameter list) is reset with no
// backend dialed, and counted; so are, with sni_no_match close, startups
// no route takes and SSLRequests.
func TestStartupMalformed(t *testing.T) {
	for _, noMatch := range []NoRoute{NoRouteDefault, NoRouteClose} {
		rig := newStartupRig(t, noMatch)
		bad := [][]byte{
			{0, 0, 0, 8, 0, 2, 0, 0},
			[]byte("GET / HTTP/1.1\r\n\r\n"),
			{0, 0, 0x27, 0x11, 0, 3, 0, 0},
			startupPacket("user", "a")[:14], // "user\0a" without its NUL
		}
		binary.BigEndian.PutUint32(bad[3], 14)
		if noMatch == NoRouteClose {
			bad = append(bad, startupPacket("user", "x", "database", "nope"), requestPacket(80877103))
		}
		for _, p := range bad {
			c := rig.ts.dial(t)
			c.Write(p)
			readReset(t, c, "client sending "+string(p))
		}
		testutil.Eventually(t, 2*time.Second, "connections ended", func() bool { return rig.ts.Stats.Active.Load() == 0 })
		for label, n := range rig.conns {
			if n.Load() != 0 {
				t.Fatalf("sni_no_match %v: pool %s dialed for a refused client", noMatch, label)
			}
		}
		st := &rig.ts.Stats.Startup
		if st.Malformed.Load() != 4 {
			t.Fatalf("sni_no_match %v: malformed %d, want 4", noMatch, st.Malformed.Load())
		}
	}
}

// TestStartupConnectionAllocatesNothing: a connection routed by its
// startup packet allocates nothing on the loop.
func TestStartupConnectionAllocatesNothing(t *testing.T) {
	pkt := startupPacket("user", "alice", "database", "tenant_7", "application_name", "bench")
	pipes := NewPipePool(0)
	ts := newServiceOn(t, pipes, newLoopsForTest(t, 1, pipes), Settings{}, rawEchoServer(t))
	r := &Route{Name: "t", Snapshots: &snapshot.Store{}}
	equalBackends(t, r.Snapshots, []netip.AddrPort{rawHelloServer(t, len(pkt))})
	rs := []*Route{r}
	rt, err := NewRoutes(rs, [][]string{nil}, 5*time.Second, NoRouteClose)
	if err != nil {
		t.Fatal(err)
	}
	ts.SetRoutes(rt.WithStartup(rs, [][]string{{"app", "tenant_*"}}, [][]string{{"alice"}}))
	routedConnsAllocateNothing(t, ts, pkt, r)
}
