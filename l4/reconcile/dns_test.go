// Named backends against a real DNS server on loopback whose records
// change while the runtime runs.

package reconcile

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	dnsnames "github.com/l4lb/l4lb/internal/names"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// namedOnPort starts a named server on each of ips with one port.
func namedOnPort(t *testing.T, ips ...string) (map[string]*namedServer, uint16) {
	t.Helper()
	out := map[string]*namedServer{}
	var port uint16
	for _, ip := range ips {
		ln, err := net.Listen("tcp4", net.JoinHostPort(ip, fmt.Sprint(port)))
		if err != nil {
			t.Fatal(err)
		}
		port = uint16(ln.Addr().(*net.TCPAddr).Port)
		s := &namedServer{name: ip}
		s.serve(ln)
		t.Cleanup(s.kill)
		out[ip] = s
	}
	return out, port
}

func dnsVIP(resolver netip.AddrPort, listen netip.AddrPort, backend string) string {
	return fmt.Sprintf(`[global]
admin_socket = "off"
resolvers = [%q]
resolve_min = "100ms"
resolve_max = "1s"
[[vip]]
name = "svc"
listen = %q
  [vip.health]
  type = "none"
  [[vip.backend]]
  address = %q
`, resolver, listen, backend)
}

func vipStatus(rt *Runtime, name string) plane.VIPStatus {
	for _, v := range rt.Status().VIPs {
		if v.Name == name {
			return v
		}
	}
	return plane.VIPStatus{}
}

// liveIDs lists the VIP's backends that are not removed.
func liveIDs(vs plane.VIPStatus) string {
	var ids []string
	for _, b := range vs.Backends {
		if !b.Removed {
			ids = append(ids, b.ID)
		}
	}
	return strings.Join(ids, " ")
}

func TestNamedBackendFollowsDNS(t *testing.T) {
	dns := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	servers, port := namedOnPort(t, "127.0.0.11", "127.0.0.12", "127.0.0.13")
	a11, a12, a13 := netip.MustParseAddr("127.0.0.11"), netip.MustParseAddr("127.0.0.12"), netip.MustParseAddr("127.0.0.13")
	dns.SetHost("svc.test", 1, a11, a12)
	listen := testutil.FreeTCPAddr(t)
	core, logs := observer.New(zap.InfoLevel)
	rt := New(zap.New(core), Options{Names: dnsnames.New(zap.New(core))})
	apply(t, rt, dnsVIP(dns.Addr, listen, fmt.Sprintf("svc.test:%d", port)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
	})
	id := func(ip string) string { return fmt.Sprintf("svc.test:%d@%s:%d", port, ip, port) }

	// At start: the answer's two addresses are the backends.
	if got, want := liveIDs(vipStatus(rt, "svc")), id("127.0.0.11")+" "+id("127.0.0.12"); got != want {
		t.Fatalf("backends at start = %q, want %q", got, want)
	}
	// An established flow on .11, and counts to carry over.
	held := dialUntil(t, listen, "127.0.0.11")
	defer held.Close()
	for range 10 {
		if _, err := dialName(listen); err != nil {
			t.Fatal(err)
		}
	}
	flows11 := mustBackend(t, rt, id("127.0.0.11")).Flows

	// Added: a third address takes new flows; the others keep their counts.
	dns.SetHost("svc.test", 1, a11, a12, a13)
	testutil.Eventually(t, 5*time.Second, "the added address becomes a backend", func() bool {
		return strings.Contains(liveIDs(vipStatus(rt, "svc")), id("127.0.0.13"))
	})
	if b := mustBackend(t, rt, id("127.0.0.11")); b.Flows < flows11 || b.LiveFlows != 1 {
		t.Fatalf("the kept backend lost its counts: flows %d (was %d), live %d", b.Flows, flows11, b.LiveFlows)
	}
	seen := dialMany(t, listen, 30)
	if seen["127.0.0.13"] == 0 {
		t.Fatalf("new flows never reached the added address: %v", seen)
	}

	// Removed and changed: .11 leaves (its established flow stays), .13 is
	// replaced by nothing new; only .12 remains.
	dns.SetHost("svc.test", 1, a12)
	testutil.Eventually(t, 5*time.Second, "the removed addresses leave", func() bool {
		return liveIDs(vipStatus(rt, "svc")) == id("127.0.0.12")
	})
	if seen := dialMany(t, listen, 20); seen["127.0.0.12"] != 20 {
		t.Fatalf("new flows after the removal: %v, want all on 127.0.0.12", seen)
	}
	echo(t, held, "still here")
	if b, ok := backendStatus(rt, "svc", id("127.0.0.11")); !ok || !b.Removed || b.LiveFlows != 1 {
		t.Fatalf("the removed backend with an established flow: %+v (listed %v)", b, ok)
	}

	// The server stops answering: the last good answer stays, status says
	// why and how old it is.
	dns.SetSilent(true)
	testutil.Eventually(t, 30*time.Second, "status shows three failed lookups", func() bool {
		ns := vipStatus(rt, "svc").Names
		return len(ns) == 1 && ns[0].Error != "" && ns[0].AnswerAge > 1.5 && ns[0].Errors >= 3
	})
	if ns := vipStatus(rt, "svc").Names[0]; fmt.Sprint(ns.Addresses) != fmt.Sprintf("[127.0.0.12:%d]", port) || liveIDs(vipStatus(rt, "svc")) != id("127.0.0.12") {
		t.Fatalf("while DNS fails: names %+v, backends %q", ns, liveIDs(vipStatus(rt, "svc")))
	}
	if _, err := dialName(listen); err != nil {
		t.Fatalf("the VIP stopped serving while DNS fails: %v", err)
	}
	dns.SetSilent(false)
	testutil.Eventually(t, 40*time.Second, "lookups succeed again", func() bool {
		ns := vipStatus(rt, "svc").Names
		return len(ns) == 1 && ns[0].Error == "" && ns[0].AnswerAge < 1.5
	})
	// Logged once per change of state, not per failed lookup.
	failed := logs.FilterMessage("backend name lookup failed: keeping the last good answer").Len()
	again := logs.FilterMessage("backend name resolves again").Len()
	if errs := vipStatus(rt, "svc").Names[0].Errors; failed != 1 || again != 1 || errs < 3 {
		t.Errorf("%d failed lookups logged %d times, recovery %d times; want once each", errs, failed, again)
	}
	_ = servers
}

// A name that never resolved leaves the VIP without backends; it serves
// once the name appears.
func TestNamedBackendNeverResolved(t *testing.T) {
	dns := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	_, port := namedOnPort(t, "127.0.0.21")
	listen := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, dnsVIP(dns.Addr, listen, fmt.Sprintf("later.test:%d", port)))
	vs := vipStatus(rt, "svc")
	if len(vs.Backends) != 0 || len(vs.Names) != 1 || len(vs.Names[0].Addresses) != 0 || !strings.Contains(vs.Names[0].Error, "no records") {
		t.Fatalf("status of a name that never resolved: backends %+v names %+v", vs.Backends, vs.Names)
	}
	if name, err := dialName(listen); err == nil {
		t.Fatalf("a VIP without backends served %q", name)
	}
	dns.SetHost("later.test", 1, netip.MustParseAddr("127.0.0.21"))
	testutil.Eventually(t, 10*time.Second, "the VIP serves once the name resolves", func() bool {
		name, err := dialName(listen)
		return err == nil && name == "127.0.0.21"
	})
	// Shutdown stops the watcher and the loop that applies answers.
	if n := nameGoroutines(); n != 2 {
		t.Fatalf("%d watcher and apply goroutines before Shutdown, want 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rt.Shutdown(ctx)
	settleNameGoroutines(t, 0, "after Shutdown")
}

// A name in the hosts file resolves as the system resolver resolves it
// (Debian's nsswitch: files, then dns), although the DNS server does not
// know it (D25). The real /etc/hosts is only read: every system maps
// localhost there (a machine that does not fails the test, which then
// proves nothing: it never skips).
func TestNamedBackendFromHostsFile(t *testing.T) {
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil || !regexp.MustCompile(`(?m)^127\.0\.0\.1\s+(\S+\s+)*localhost(\s|$)`).Match(hosts) {
		t.Fatalf("/etc/hosts does not map localhost to 127.0.0.1 (%v): the test needs the system's usual line", err)
	}
	dns := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	_, port := namedOnPort(t, "127.0.0.1")
	listen := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, dnsVIP(dns.Addr, listen, fmt.Sprintf("localhost:%d", port)))
	want := fmt.Sprintf("localhost:%d@127.0.0.1:%d", port, port)
	if ids := liveIDs(vipStatus(rt, "svc")); !strings.Contains(ids, want) {
		t.Fatalf("backends %q, want %s (from /etc/hosts); names %+v", ids, want, vipStatus(rt, "svc").Names)
	}
	if name, err := dialName(listen); err != nil || name != "127.0.0.1" {
		t.Fatalf("through the VIP: %q, %v", name, err)
	}
	if n := dns.Queries(); n != 0 {
		t.Errorf("the DNS server was asked %d times for a name the hosts file has", n)
	}
}

// settleNameGoroutines waits briefly for the count of name goroutines to
// reach want: a stopped watcher has closed its done channel (Stop
// returned) a moment before its goroutine is gone from the stacks.
func settleNameGoroutines(t *testing.T, want int, when string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for n := nameGoroutines(); n != want; n = nameGoroutines() {
		if time.Now().After(deadline) {
			t.Fatalf("%d watcher and apply goroutines %s, want %d", n, when, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nameGoroutines counts the goroutines of name watchers and of the
// runtime's loop that applies their answers.
func nameGoroutines() int {
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	return strings.Count(stacks, "resolve.(*Watcher).run(") + strings.Count(stacks, "reconcile.(*Runtime).runNames(")
}

func mustBackend(t *testing.T, rt *Runtime, id string) plane.BackendStatus {
	t.Helper()
	b, ok := backendStatus(rt, "svc", id)
	if !ok {
		t.Fatalf("no backend %s in %q", id, liveIDs(vipStatus(rt, "svc")))
	}
	return b
}

// dialUntil connects until a connection lands on backend want, and keeps it.
func dialUntil(t *testing.T, addr netip.AddrPort, want string) net.Conn {
	t.Helper()
	for range 50 {
		c, err := net.DialTimeout("tcp4", addr.String(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err == nil && string(buf[:n-1]) == want {
			c.SetReadDeadline(time.Time{})
			return c
		}
		c.Close()
	}
	t.Fatalf("no connection reached %s", want)
	return nil
}

func dialMany(t *testing.T, addr netip.AddrPort, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		name, err := dialName(addr)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	return seen
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("established flow: write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("established flow: echo %q, %v", buf, err)
	}
}

// SRV: one backend per target address on the record's port; the lowest
// priority's targets are primaries, the others backups.
func TestSRVBackends(t *testing.T) {
	dns := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	_, port := namedOnPort(t, "127.0.0.31", "127.0.0.32")
	dns.SetHost("t1.test", 1, netip.MustParseAddr("127.0.0.31"))
	dns.SetHost("t2.test", 1, netip.MustParseAddr("127.0.0.32"))
	dns.SetSRV("_svc._tcp.test", 1, testutil.SRVRecord{Priority: 10, Port: port, Target: "t2.test"}, testutil.SRVRecord{Priority: 5, Port: port, Target: "t1.test"})
	listen := testutil.FreeTCPAddr(t)
	toml := strings.Replace(dnsVIP(dns.Addr, listen, ""), "  address = \"\"\n", "  name = \"pool\"\n  srv = \"_svc._tcp.test\"\n", 1)
	rt := startRuntime(t, toml)
	backup := map[string]bool{}
	for _, b := range vipStatus(rt, "svc").Backends {
		backup[b.ID] = b.Backup
	}
	p1, p2 := fmt.Sprintf("pool@127.0.0.31:%d", port), fmt.Sprintf("pool@127.0.0.32:%d", port)
	if len(backup) != 2 || backup[p1] || !backup[p2] {
		t.Fatalf("backends (id: backup) = %v, want %s primary and %s backup", backup, p1, p2)
	}
	if seen := dialMany(t, listen, 10); seen["127.0.0.31"] != 10 {
		t.Fatalf("flows %v, want all on the lowest priority", seen)
	}
	// The primary's record leaves: the backup target serves.
	dns.SetSRV("_svc._tcp.test", 1, testutil.SRVRecord{Priority: 10, Port: port, Target: "t2.test"})
	testutil.Eventually(t, 10*time.Second, "the remaining target becomes the primary", func() bool {
		name, err := dialName(listen)
		return err == nil && name == "127.0.0.32"
	})
}

// A reload keeps a name's watcher and answer (and so its backends); a
// reload that drops the name stops its watcher.
func TestNamedBackendReload(t *testing.T) {
	dns := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	_, port := namedOnPort(t, "127.0.0.41", "127.0.0.42")
	dns.SetHost("svc.test", 60, netip.MustParseAddr("127.0.0.41"))
	listen := testutil.FreeTCPAddr(t)
	named := dnsVIP(dns.Addr, listen, fmt.Sprintf("svc.test:%d", port))
	rt := startRuntime(t, named)
	id := fmt.Sprintf("svc.test:%d@127.0.0.41:%d", port, port)
	dialMany(t, listen, 5)
	queries := dns.Queries()

	apply(t, rt, strings.Replace(named, "  [[vip.backend]]\n", "  [[vip.backend]]\n  weight = 50\n", 1))
	if b := mustBackend(t, rt, id); b.Flows != 5 || b.Weight != 50 {
		t.Fatalf("after a reload that changed the weight: %+v", b)
	}
	if n, q := nameGoroutines(), dns.Queries(); n != 2 || q != queries {
		t.Fatalf("after the reload: %d watcher and apply goroutines (want 2), %d queries (want %d: no new lookup)", n, q, queries)
	}

	apply(t, rt, strings.Replace(named, fmt.Sprintf("svc.test:%d", port), fmt.Sprintf("127.0.0.42:%d", port), 1))
	if vs := vipStatus(rt, "svc"); len(vs.Names) != 0 || liveIDs(vs) != fmt.Sprintf("127.0.0.42:%d", port) {
		t.Fatalf("after a reload without the name: names %+v, backends %q", vs.Names, liveIDs(vs))
	}
	settleNameGoroutines(t, 1, "after the name left the config (the apply loop only)")
}

// TestStatusAnswersWhileApplyWaitsForDNS: a reload that adds a name whose
// server does not answer waits for it (up to names.FirstAnswerWait) without the
// lock that Status takes, so status and the admin API answer meanwhile;
// the reload then applies, the name's backend absent until it resolves.
func TestStatusAnswersWhileApplyWaitsForDNS(t *testing.T) {
	dns := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	_, port := namedOnPort(t, "127.0.0.51")
	listen := testutil.FreeTCPAddr(t)
	plain := dnsVIP(dns.Addr, listen, fmt.Sprintf("127.0.0.51:%d", port))
	rt := startRuntime(t, plain)
	dns.SetSilent(true)
	next := parse(t, plain+fmt.Sprintf("  [[vip.backend]]\n  address = \"slow.test:%d\"\n", port))
	applied := make(chan error, 1)
	start := time.Now()
	go func() { applied <- rt.Apply(next) }()
	time.Sleep(200 * time.Millisecond) // the reload is waiting for slow.test now
	statusAt := time.Now()
	if vs := vipStatus(rt, "svc"); len(vs.Backends) != 1 {
		t.Fatalf("status during the reload: %+v", vs.Backends)
	}
	if took := time.Since(statusAt); took > time.Second {
		t.Fatalf("plane.Status took %v while a reload waited for DNS", took)
	}
	select {
	case err := <-applied:
		t.Fatalf("the reload did not wait for the new name's first answer (returned %v after %v)", err, time.Since(start))
	default:
	}
	select {
	case err := <-applied:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(dnsnames.FirstAnswerWait + 5*time.Second):
		t.Fatal("the reload never returned")
	}
	if vs := vipStatus(rt, "svc"); len(vs.Names) != 1 || len(vs.Backends) != 1 {
		t.Fatalf("after the reload: names %+v backends %+v", vs.Names, vs.Backends)
	}
}

// TestReloadChangesResolvers: a reload that points resolvers at another
// server makes the names follow that server's answers, and the kept
// address keeps its backend (counts and an established flow).
func TestReloadChangesResolvers(t *testing.T) {
	first := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	second := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	_, port := namedOnPort(t, "127.0.0.61", "127.0.0.62")
	a61, a62 := netip.MustParseAddr("127.0.0.61"), netip.MustParseAddr("127.0.0.62")
	first.SetHost("svc.test", 1, a61)
	second.SetHost("svc.test", 1, a61, a62)
	listen := testutil.FreeTCPAddr(t)
	backend := fmt.Sprintf("svc.test:%d", port)
	rt := startRuntime(t, dnsVIP(first.Addr, listen, backend))
	id := func(ip string) string { return fmt.Sprintf("svc.test:%d@%s:%d", port, ip, port) }
	if got := liveIDs(vipStatus(rt, "svc")); got != id("127.0.0.61") {
		t.Fatalf("backends from the first server: %q", got)
	}
	held := dialUntil(t, listen, "127.0.0.61")
	defer held.Close()

	apply(t, rt, dnsVIP(second.Addr, listen, backend))
	testutil.Eventually(t, 5*time.Second, "the second server's answer applies", func() bool {
		return liveIDs(vipStatus(rt, "svc")) == id("127.0.0.61")+" "+id("127.0.0.62")
	})
	if b := mustBackend(t, rt, id("127.0.0.61")); b.LiveFlows != 1 {
		t.Fatalf("the kept address lost its established flow: %+v", b)
	}
	echo(t, held, "still here")
	before := first.Queries()
	time.Sleep(1500 * time.Millisecond) // past resolve_max: a watcher still on the first server would ask it
	if q := first.Queries(); q != before {
		t.Fatalf("the first server was asked %d more times after the reload moved resolvers away", q-before)
	}
}

// TestMaglevTableWarnsForManyAddresses: load checks maglev_table_size
// against one backend per name; when the name resolves to more addresses
// than the table serves well (100 slots each), the runtime says so.
func TestMaglevTableWarnsForManyAddresses(t *testing.T) {
	dns := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	var addrs []netip.Addr
	for i := range 11 { // 11 x 100 slots > 1009
		addrs = append(addrs, netip.AddrFrom4([4]byte{127, 0, 0, byte(70 + i)}))
	}
	dns.SetHost("many.test", 60, addrs...)
	conf := strings.Replace(dnsVIP(dns.Addr, testutil.FreeTCPAddr(t), "many.test:9"), "[[vip]]\n", "[[vip]]\nalgorithm = \"maglev\"\nmaglev_table_size = 1009\n", 1)
	rt, logs := observedRuntime(t, conf)
	if n := len(vipStatus(rt, "svc").Backends); n != 11 {
		t.Fatalf("%d backends, want the 11 addresses", n)
	}
	warned := logs.FilterMessageSnippet("maglev_table_size is too small").All()
	if len(warned) == 0 || warned[0].ContextMap()["want_at_least"] != int64(1100) {
		t.Fatalf("no warning about the table size for 11 addresses: %v", warned)
	}
}

// TestNamedBackendsNeedNames: a runtime made without Names refuses a
// config with named backends rather than run it without them.
func TestNamedBackendsNeedNames(t *testing.T) {
	rt := New(zap.NewNop(), Options{})
	defer rt.Shutdown(context.Background())
	err := rt.Apply(parse(t, dnsVIP(netip.MustParseAddrPort("127.0.0.1:53"), testutil.FreeTCPAddr(t), "db.test:5432")))
	if err == nil || !strings.Contains(err.Error(), "Options.Names") {
		t.Fatalf("Apply: %v, want a refusal naming Options.Names", err)
	}
}
