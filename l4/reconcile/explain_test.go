// Explain on a running Runtime with real servers: the backend it names is
// the one a real connection from that client then reaches, for every
// algorithm where the choice is determined; pins, sessions and
// established connections decide first; and explaining changes nothing.

package reconcile

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/proxy"
)

const explainVIP = `
[global]
admin_socket = "off"
[[vip]]
name = "v"
listen = "%s"
protocol = "%s"
algorithm = "%s"
%s
  [vip.health]
  type = "none"
%s`

// explainRuntime runs VIP "v" over servers s1..s3 (TCP named echoes).
func explainRuntime(t *testing.T, algorithm, extra string) (*Runtime, netip.AddrPort) {
	t.Helper()
	addrs := map[string]netip.AddrPort{}
	for _, n := range []string{"s1", "s2", "s3"} {
		addrs[n] = startNamed(t, n).addr
	}
	vip := testutil.FreeTCPAddr(t)
	return startRuntime(t, fmt.Sprintf(explainVIP, vip, "tcp", algorithm, extra, backendsTOML(addrs))), vip
}

func mustExplain(t *testing.T, rt *Runtime, client string) plane.Explanation {
	t.Helper()
	c, err := plane.ParseClient(client)
	if err != nil {
		t.Fatal(err)
	}
	e, err := rt.Explain("v", c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// heldConn is a connection from a chosen source through the VIP, with
// the name of the backend that answered.
type heldConn struct {
	net.Conn
	name string
}

// dialFrom connects to vip from local (port 0: any) and reads the
// backend's name; the connection stays open until cleanup or Close.
func dialFrom(t *testing.T, vip, local netip.AddrPort) *heldConn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(local)}
	c, err := d.Dial("tcp4", vip.String())
	if err != nil {
		t.Fatalf("dial %s from %s: %v", vip, local, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", vip, local, err)
	}
	return &heldConn{Conn: c, name: strings.TrimSpace(string(buf[:n]))}
}

// askFrom connects from local, returns the backend's name and closes.
func askFrom(t *testing.T, vip, local netip.AddrPort) string {
	t.Helper()
	c := dialFrom(t, vip, local)
	c.Close()
	return c.name
}

// clientAddr is 127.0.0.i (any port when port is 0).
func clientAddr(i int, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i)}), port)
}

// freeClientPort returns a port that 127.0.0.i can bind for TCP now.
func freeClientPort(t *testing.T, i int) uint16 {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(clientAddr(i, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).AddrPort().Port()
}

func liveFlows(rt *Runtime) map[string]int64 {
	out := map[string]int64{}
	for _, b := range rt.Status().VIPs[0].Backends {
		out[b.ID] = b.LiveFlows
	}
	return out
}

// wantBackend checks that e names a backend and returns its ID.
func wantBackend(t *testing.T, e plane.Explanation) string {
	t.Helper()
	if e.Backend == nil || e.Backend.ID == "" {
		t.Fatalf("no backend explained: %s (%+v)", e.Because, e)
	}
	return e.Backend.ID
}

// TestExplainHashing: maglev and source_hash, on the client address alone
// and on address and port: the explained backend is the one connections
// from that client reach.
func TestExplainHashing(t *testing.T) {
	for _, tc := range []struct{ algorithm, key string }{
		{"maglev", "src_ip"}, {"maglev", "5tuple"}, {"source_hash", "src_ip"}, {"source_hash", "src_ip_port"},
	} {
		t.Run(tc.algorithm+"/"+tc.key, func(t *testing.T) {
			rt, vip := explainRuntime(t, tc.algorithm, fmt.Sprintf("hash_key = %q", tc.key))
			seen := map[string]bool{}
			for i := 2; i < 14; i++ {
				port := uint16(0)
				if tc.key != "src_ip" {
					port = freeClientPort(t, i)
					e := mustExplain(t, rt, clientAddr(i, 0).Addr().String())
					if e.Backend != nil || !strings.Contains(e.Because, "covers the client port") {
						t.Fatalf("no port with hash_key %s: %s (%+v)", tc.key, e.Because, e.Backend)
					}
				}
				client := clientAddr(i, port)
				e := mustExplain(t, rt, strings.TrimSuffix(client.String(), ":0"))
				want := wantBackend(t, e)
				h := e.Pick.Hash
				if e.HashKey != tc.key || h == nil || h.Key != tc.key || h.Owner == nil || h.Owner.ID != want || e.Pick.Generation == 0 {
					t.Fatalf("%s: %+v %+v", client, e, h)
				}
				if tc.algorithm == "maglev" && (h.Maglev == nil || h.Maglev.TableSize != 65537 || !strings.HasPrefix(e.Because, "maglev: hash 0x")) {
					t.Fatalf("%s: maglev path %+v, because %q", client, h.Maglev, e.Because)
				}
				if tc.algorithm == "source_hash" && (h.Ring == nil || h.Ring.Points == 0 || h.Ring.Vnodes == 0) {
					t.Fatalf("%s: ring path %+v", client, h.Ring)
				}
				if got := askFrom(t, vip, client); got != want {
					t.Fatalf("%s: explained %s, the connection reached %s", client, want, got)
				}
				seen[want] = true
			}
			if len(seen) < 2 {
				t.Fatalf("12 clients all hashed to %v: the test shows little", seen)
			}
		})
	}
}

// TestExplainLeastConn: two connections held on two backends leave one
// clear winner; the explained one takes the next connection.
func TestExplainLeastConn(t *testing.T) {
	rt, vip := explainRuntime(t, "least_conn", "")
	if e := mustExplain(t, rt, "127.0.0.2"); e.Backend != nil || len(e.Pick.Tied) != 3 || !strings.Contains(e.Because, "tie") {
		t.Fatalf("idle VIP: %s %+v", e.Because, e.Pick)
	}
	a, b := dialFrom(t, vip, clientAddr(3, 0)), dialFrom(t, vip, clientAddr(3, 0))
	testutil.Eventually(t, 2*time.Second, "two live flows", func() bool {
		n := int64(0)
		for _, l := range liveFlows(rt) {
			n += l
		}
		return n == 2
	})
	before := liveFlows(rt)
	e := mustExplain(t, rt, "127.0.0.2")
	want := wantBackend(t, e)
	if want == a.name || want == b.name || !strings.HasPrefix(e.Because, "least_conn") {
		t.Fatalf("held on %s and %s, explained %s (%s)", a.name, b.name, want, e.Because)
	}
	for _, c := range e.Candidates {
		if c.LiveFlows != before[c.ID] || c.Load != float64(c.LiveFlows)/100 || !c.Candidate {
			t.Fatalf("candidate %+v, live flows %v", c, before)
		}
	}
	if after := liveFlows(rt); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("explaining changed live flows: %v -> %v", before, after)
	}
	if got := askFrom(t, vip, clientAddr(2, 0)); got != want {
		t.Fatalf("explained %s, the connection reached %s", want, got)
	}
}

// TestExplainLeastTime: distinct RTTs; the lowest cost per weight wins.
func TestExplainLeastTime(t *testing.T) {
	rt, vip := explainRuntime(t, "least_time", "")
	v := rt.vipNamed("v")
	for id, rtt := range map[l4.BackendID]time.Duration{"s1": 5 * time.Millisecond, "s2": time.Millisecond, "s3": 3 * time.Millisecond} {
		v.backendByID(id).ObserveRTT(rtt)
	}
	e := mustExplain(t, rt, "127.0.0.2")
	if wantBackend(t, e) != "s2" || !strings.HasPrefix(e.Because, "least_time") {
		t.Fatalf("explained %s: %s", e.Backend.ID, e.Because)
	}
	for _, c := range e.Candidates {
		if c.ID == "s2" && (c.Cost != 2*time.Millisecond || !c.RTTSampled || c.RTT != time.Millisecond) {
			t.Fatalf("s2: %+v", c)
		}
	}
	if got := askFrom(t, vip, clientAddr(2, 0)); got != "s2" {
		t.Fatalf("explained s2, the connection reached %s", got)
	}
}

// TestExplainRotationAndChance: round_robin names the VIP's next pick
// (which explaining does not advance); p2c and random name none.
func TestExplainRotationAndChance(t *testing.T) {
	rt, vip := explainRuntime(t, "round_robin", "")
	for range 4 {
		e := mustExplain(t, rt, "127.0.0.2")
		mustExplain(t, rt, "127.0.0.2") // twice: no advance
		if e.Backend != nil || e.Pick.Next == nil || !strings.Contains(e.Because, "round_robin rotates") {
			t.Fatalf("round robin: %s %+v", e.Because, e.Pick)
		}
		if got := askFrom(t, vip, clientAddr(2, 0)); got != e.Pick.Next.ID {
			t.Fatalf("explained next %s, the connection reached %s", e.Pick.Next.ID, got)
		}
	}
	for _, alg := range []string{"p2c", "random"} {
		rt, vip := explainRuntime(t, alg, "")
		e := mustExplain(t, rt, "127.0.0.2")
		share := 0.0
		for _, c := range e.Candidates {
			share += c.Share
		}
		if e.Backend != nil || !strings.Contains(e.Because, "chance") || share < 0.99 || share > 1.01 {
			t.Fatalf("%s: %s, shares %v", alg, e.Because, share)
		}
		if got := askFrom(t, vip, clientAddr(2, 0)); !strings.HasPrefix(got, "s") {
			t.Fatalf("%s: connection reached %q", alg, got)
		}
	}
}

// TestExplainAffinity: a connection pins the client's address; explain
// shows the pin and its backend (which new connections then reach),
// without refreshing it; an established connection decides for its own
// port; a drain keeps the pin, a disable ends it.
func TestExplainAffinity(t *testing.T) {
	rt, vip := explainRuntime(t, "round_robin", `affinity_timeout = "1m"`)
	e := mustExplain(t, rt, "127.0.0.5")
	if len(e.Pinned) != 0 || !strings.Contains(strings.Join(e.Unpinned, ";"), "no affinity entry for 127.0.0.5") {
		t.Fatalf("before any connection: %+v %v", e.Pinned, e.Unpinned)
	}
	first := askFrom(t, vip, clientAddr(5, 0))
	waitIdle(t, rt)
	aff := rt.vipNamed("v").dp.(*proxy.TCPPlane).Affinity()
	lookups := aff.Stats().Lookups
	e = mustExplain(t, rt, "127.0.0.5")
	if len(e.Pinned) != 1 || e.Pinned[0].Kind != "affinity" || !e.Pinned[0].Decides || e.Pinned[0].Backend.ID != first ||
		wantBackend(t, e) != first || e.Pinned[0].TimeoutSeconds != 60 || !strings.HasPrefix(e.Because, "affinity pin") {
		t.Fatalf("after a connection to %s: %s %+v", first, e.Because, e.Pinned)
	}
	if aff.Stats().Lookups != lookups {
		t.Fatal("explaining looked the pin up (and refreshed it)")
	}
	for range 3 {
		if got := askFrom(t, vip, clientAddr(5, 0)); got != first {
			t.Fatalf("pinned to %s, a connection reached %s", first, got)
		}
	}

	// An established connection from a port decides for that port.
	port := freeClientPort(t, 5)
	held := dialFrom(t, vip, clientAddr(5, port))
	e = mustExplain(t, rt, clientAddr(5, port).String())
	if len(e.Pinned) != 2 || e.Pinned[0].Kind != "connection" || !e.Pinned[0].Decides || e.Pinned[1].Decides ||
		e.Backend.ID != held.name || !strings.Contains(e.Because, "established connection") {
		t.Fatalf("established from %d: %s %+v", port, e.Because, e.Pinned)
	}
	held.Close()
	waitIdle(t, rt)

	// Drained: the pin holds. Disabled: it no longer decides.
	if _, err := rt.SetOverride("v", first, l4.OverrideDrain, "test", false); err != nil {
		t.Fatal(err)
	}
	e = mustExplain(t, rt, "127.0.0.5")
	if e.Backend == nil || e.Backend.ID != first || !strings.Contains(candidate(t, e, first).Why, "drained by test") {
		t.Fatalf("drained: %s %+v", e.Because, e.Candidates)
	}
	if _, err := rt.SetOverride("v", first, l4.OverrideDisable, "test", false); err != nil {
		t.Fatal(err)
	}
	e = mustExplain(t, rt, "127.0.0.5")
	c := candidate(t, e, first)
	if e.Backend != nil || e.Pinned[0].Decides || !strings.Contains(e.Pinned[0].Why, "takes no pinned flows") || c.Candidate || c.EffectiveWeight != 0 {
		t.Fatalf("disabled: %s %+v %+v", e.Because, e.Pinned, c)
	}
	if e.Pick.Next == nil || e.Pick.Next.ID == first {
		t.Fatalf("the next pick goes to the disabled backend: %+v", e.Pick)
	}
}

// waitIdle waits until the VIP's connections have ended.
func waitIdle(t *testing.T, rt *Runtime) {
	t.Helper()
	testutil.Eventually(t, 2*time.Second, "connections to end", func() bool {
		for _, n := range liveFlows(rt) {
			if n != 0 {
				return false
			}
		}
		return true
	})
}

func candidate(t *testing.T, e plane.Explanation, id string) plane.Candidate {
	t.Helper()
	for _, c := range e.Candidates {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no candidate %s in %+v", id, e.Candidates)
	return plane.Candidate{}
}

// startNamedUDP serves UDP on loopback, answering each datagram with its
// name.
func startNamedUDP(t *testing.T, name string) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(testutil.FreeTCPAddr(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	reply := []byte(name + "\n")
	go testutil.ServeDatagrams(pc, func([]byte) []byte { return reply })
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// TestExplainUDPSession: a session decides for its client address and
// port, and moves when its backend is disabled, to the backend explain
// then names.
func TestExplainUDPSession(t *testing.T) {
	addrs := map[string]netip.AddrPort{}
	for _, n := range []string{"s1", "s2", "s3"} {
		addrs[n] = startNamedUDP(t, n)
	}
	vip := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, fmt.Sprintf(explainVIP, vip, "udp", "maglev", `hash_key = "src_ip_port"`, backendsTOML(addrs)))
	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(clientAddr(9, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	client := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	ask := func() string {
		t.Helper()
		pc.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := pc.WriteToUDPAddrPort([]byte("q"), vip); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := pc.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(buf[:n]))
	}
	e := mustExplain(t, rt, client.String())
	want := wantBackend(t, e)
	if len(e.Pinned) != 0 || !strings.Contains(e.Unpinned[0], "no UDP session") {
		t.Fatalf("before the first datagram: %+v %v", e.Pinned, e.Unpinned)
	}
	if got := ask(); got != want {
		t.Fatalf("explained %s, the datagram reached %s", want, got)
	}
	table := rt.vipNamed("v").dp.(*proxy.UDPPlane).Table()
	lookups := table.Stats().Lookups
	e = mustExplain(t, rt, client.String())
	if len(e.Pinned) != 1 || e.Pinned[0].Kind != "session" || !e.Pinned[0].Decides || e.Backend.ID != want || e.Pinned[0].TimeoutSeconds != 30 {
		t.Fatalf("with a session: %s %+v", e.Because, e.Pinned)
	}
	if table.Stats().Lookups != lookups {
		t.Fatal("explaining looked the session up (and refreshed it)")
	}
	// Without the port: the session is listed, the port decides.
	e = mustExplain(t, rt, client.Addr().String())
	if e.Backend != nil || len(e.Pinned) != 1 || e.Pinned[0].Decides || !strings.Contains(e.Because, "covers the client port") {
		t.Fatalf("without the port: %s %+v", e.Because, e.Pinned)
	}
	// Disabled: the session no longer decides; the next datagram goes
	// where the table says.
	if _, err := rt.SetOverride("v", want, l4.OverrideDisable, "test", true); err != nil {
		t.Fatal(err)
	}
	e = mustExplain(t, rt, client.String())
	next := wantBackend(t, e)
	if next == want || e.Pinned[0].Decides || !strings.HasPrefix(e.Because, "maglev") {
		t.Fatalf("session on a disabled backend: %s %+v", e.Because, e.Pinned)
	}
	if got := ask(); got != next {
		t.Fatalf("explained %s after the disable, the datagram reached %s", next, got)
	}
}

func TestExplainErrors(t *testing.T) {
	rt, _ := explainRuntime(t, "maglev", "")
	if _, err := rt.Explain("nosuch", clientAddr(2, 0)); !errors.Is(err, ErrNoVIP) {
		t.Fatalf("unknown VIP: %v", err)
	}
	if _, err := rt.Explain("v", netip.MustParseAddrPort("[2001:db8::1]:80")); !errors.Is(err, plane.ErrBadClient) {
		t.Fatalf("IPv6 client of an IPv4 VIP: %v", err)
	}
}

// TestExplainAccess: explain names the rule that admits or refuses a
// client, and a refused client gets no backend.
func TestExplainAccess(t *testing.T) {
	rt, _ := explainRuntime(t, "maglev", `allow = ["127.0.0.0/8"]`+"\n"+`deny = ["127.0.0.66"]`)
	for _, tc := range []struct {
		client, access string
		backend        bool
	}{
		{"127.0.0.2", "allowed by allow 127.0.0.0/8", true},
		{"127.0.0.66", "refused by deny 127.0.0.66/32", false},
	} {
		e := mustExplain(t, rt, tc.client)
		if e.Access != tc.access || (e.Backend != nil) != tc.backend {
			t.Errorf("%s: access %q, backend %+v, because %q", tc.client, e.Access, e.Backend, e.Because)
		}
		if !tc.backend && !strings.Contains(e.Because, "refused by deny") {
			t.Errorf("%s: because %q", tc.client, e.Because)
		}
	}
}
