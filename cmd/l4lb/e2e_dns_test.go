// DNS-named backends end to end: l4lb runs against a real DNS server in
// the balancer's namespace whose records the test changes.

package main

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

var dnsVIPs = newConf(`drain_timeout = "3s"`, `resolvers = ["198.18.1.1"]`, `resolve_min = "200ms"`, `resolve_max = "1s"`).
	vip("a", ":80").backend(`address = "pg.db.test:7000"`).
	vip("b", ":81").backend(`name = "later"`, `address = "later.db.test:7000"`).String()

// nameIDs lists a VIP's backends that take part (not removed), by the
// backend name their address leads to (be0 is 198.18.1.11).
func nameIDs(st plane.Status, vip string) []string {
	var out []string
	for _, v := range st.VIPs {
		if v.Name != vip {
			continue
		}
		for _, b := range v.Backends {
			if !b.Removed {
				out = append(out, "be"+string(rune('0'+netip.MustParseAddrPort(b.Address).Addr().As4()[3]-11)))
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestDNSNamedBackends(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	dns := testutil.StartDNSServer(t, tp.LB, "198.18.1.1:53")
	be := func(i int) netip.Addr { return tp.BackendIP(i) }
	dns.SetHost("pg.db.test", 1, be(0), be(1))

	// check passes without the name that does not resolve, and says which.
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "l4lb.toml")
	(&lbProcess{cfg: cfgPath}).writeConfig(t, strings.ReplaceAll(dnsVIPs, "@ADMIN@", filepath.Join(dir, "none.sock")))
	out, err := tp.LB.Command(mustBin(t), "check", "--config", cfgPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `vip "b": vip[1].backend[0].address: later.db.test:7000 does not resolve now`) ||
		strings.Contains(string(out), "pg.db.test:7000 does not") {
		t.Fatalf("check: %v\n%s", err, out)
	}

	lb := startLB(t, tp, dnsVIPs)
	st := lb.status(t)
	if got := nameIDs(st, "a"); !slices.Equal(got, []string{"be0", "be1"}) {
		t.Fatalf("vip a at start: %v", got)
	}
	var established *clientConn
	for range 50 {
		c := mustDialVIP(t, tp, 80)
		if c.backend == "be0" {
			established = c
			break
		}
		c.Close()
	}
	if established == nil {
		t.Fatal("no connection reached be0")
	}
	backendsSeen(t, tp, 80, 10)
	flowsBe1 := lb.backend(t, "a", "pg.db.test:7000@198.18.1.12:7000").Flows

	// Added: new flows reach the third address.
	dns.SetHost("pg.db.test", 1, be(0), be(1), be(2))
	testutil.Eventually(t, 10*time.Second, "be2 joins vip a", func() bool {
		return slices.Equal(nameIDs(lb.status(t), "a"), []string{"be0", "be1", "be2"})
	})
	// The kept addresses are the same backends: counts and the
	// established flow carry over.
	if n := lb.backend(t, "a", "pg.db.test:7000@198.18.1.12:7000").Flows; flowsBe1 == 0 || n < flowsBe1 {
		t.Fatalf("be1's flow count went from %d to %d: the DNS change made it a new backend", flowsBe1, n)
	}
	if b := lb.backend(t, "a", "pg.db.test:7000@198.18.1.11:7000"); b.LiveFlows != 1 {
		t.Fatalf("be0 after the DNS change: %d live flows, want the established one", b.LiveFlows)
	}
	if seen := backendsSeen(t, tp, 80, 30); seen["be2"] == 0 {
		t.Fatalf("no new flow reached the added address: %v", seen)
	}

	// Removed: no new flow goes to be0; its established flow continues;
	// be1 keeps its counts (the same backend, not a new one).
	dns.SetHost("pg.db.test", 1, be(1), be(2))
	testutil.Eventually(t, 10*time.Second, "be0 leaves vip a", func() bool {
		return slices.Equal(nameIDs(lb.status(t), "a"), []string{"be1", "be2"})
	})
	if seen := backendsSeen(t, tp, 80, 30); seen["be0"] != 0 {
		t.Fatalf("new flows reached the removed address: %v", seen)
	}
	if err := established.echo("after the removal"); err != nil {
		t.Fatalf("established flow on the removed address: %v", err)
	}
	if n := lb.backend(t, "a", "pg.db.test:7000@198.18.1.12:7000").Flows; n < flowsBe1 {
		t.Fatalf("be1's flow count went from %d to %d: the DNS change made it a new backend", flowsBe1, n)
	}

	// Changed: be1's record becomes be0's.
	dns.SetHost("pg.db.test", 1, be(0), be(2))
	testutil.Eventually(t, 10*time.Second, "vip a follows the changed record", func() bool {
		return slices.Equal(nameIDs(lb.status(t), "a"), []string{"be0", "be2"})
	})
	if seen := backendsSeen(t, tp, 80, 30); seen["be1"] != 0 || seen["be0"] == 0 {
		t.Fatalf("after the change: %v", seen)
	}

	// A name that never resolved: vip b has no backend and says why.
	b := vipNamed(lb.status(t), "b")
	if len(b.Backends) != 0 || len(b.Names) != 1 || len(b.Names[0].Addresses) != 0 || b.Names[0].Error == "" {
		t.Fatalf("vip b, never resolved: backends %+v, names %+v", b.Backends, b.Names)
	}
	if c, err := dialVIPWithin(tp, 81, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("vip b without backends served %s", c.backend)
	}

	// The server stops answering: the last good answer stays in use;
	// status shows the error and the answer's age.
	dns.SetSilent(true)
	testutil.Eventually(t, 20*time.Second, "status shows the failing lookups", func() bool {
		n := vipNamed(lb.status(t), "a").Names
		return len(n) == 1 && n[0].Error != "" && n[0].AnswerAge > 3
	})
	if text := lb.statusText(t); !strings.Contains(text, "dns pg.db.test:7000: 198.18.1.11:7000 198.18.1.13:7000 (answer ") ||
		!strings.Contains(text, "FAILING for") || !strings.Contains(text, "dns later.db.test:7000: NOT RESOLVED") {
		t.Fatalf("text status while DNS fails:\n%s", text)
	}
	if seen := backendsSeen(t, tp, 80, 10); seen["be0"]+seen["be2"] != 10 {
		t.Fatalf("while DNS fails: %v", seen)
	}

	// It answers again, with the name vip b waited for.
	dns.SetHost("later.db.test", 1, be(1))
	dns.SetSilent(false)
	testutil.Eventually(t, 40*time.Second, "vip b serves once its name resolves", func() bool {
		c, err := dialVIPWithin(tp, 81, 2*time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return c.backend == "be1"
	})
	// Each name retries on its own schedule, and a lookup sent while the
	// server was silent times out after it answers again: vip a's name
	// clears at its next lookup, not with vip b's.
	testutil.Eventually(t, 20*time.Second, "vip a's name resolves again", func() bool {
		return vipNamed(lb.status(t), "a").Names[0].Error == ""
	})
	if err := established.echo("at the end"); err != nil {
		t.Fatalf("established flow: %v", err)
	}
}
