// Guards: access lists (acl trie), the per-source SYN rate and the
// per-VIP new-flow rate, through BPF_PROG_TEST_RUN.

package bpf

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func mustACL(t testing.TB, allow, deny []netip.Prefix) *guard.ACL {
	t.Helper()
	a, err := guard.NewACL(allow, deny)
	must(t, err)
	return a
}

// guardVIP writes v (an l2 VIP on backend 1 at index) with e's guards.
func guardVIP(t *testing.T, e *ctEnv, v l4.VIPKey, index uint32, ve VIPEntry) {
	t.Helper()
	ve.Index, ve.Forward, ve.HashKey = index, l4.ForwardL2, l4.HashFiveTuple
	must(t, e.lb.SetVIP(v, ve))
	e.table(t, index, 1)
}

func flowFrom(src string, port uint16, v l4.VIPKey) l4.Flow {
	return l4.Flow{Src: netip.AddrPortFrom(netip.MustParseAddr(src), port), Dst: v.Addr, Proto: v.Proto}
}

// TestACL: the most specific network decides in both directions, both
// families; no match is allowed only without an allow list; an IPv6
// network never decides for an IPv4 client (l4/guard's rule); every
// verdict agrees with guard.ACL.Allowed, and denials are counted.
func TestACL(t *testing.T) {
	vip6 := vip6TCP
	cases := []struct {
		name        string
		allow, deny []netip.Prefix
		clients     map[string]bool // address -> allowed
	}{
		{"deny wider, allow narrower", prefixes("198.18.1.0/24", "2001:db8:1:1::/64"), prefixes("198.18.0.0/16", "2001:db8:1::/48"), map[string]bool{
			"198.18.1.7": true, "198.18.2.7": false, "198.19.0.1": false, // allow list: default deny
			"2001:db8:1:1::5": true, "2001:db8:1:2::5": false, "2001:db8:9::1": false,
		}},
		{"allow wider, deny narrower", prefixes("198.18.0.0/16", "2001:db8:1::/48"), prefixes("198.18.1.0/24", "198.18.2.3/32", "2001:db8:1:1::/64"), map[string]bool{
			"198.18.1.7": false, "198.18.2.3": false, "198.18.2.4": true, "198.19.0.1": false,
			"2001:db8:1:1::5": false, "2001:db8:1:2::5": true,
		}},
		{"deny only: default allow", nil, prefixes("198.18.5.0/24", "2001:db8:5::/48"), map[string]bool{
			"198.18.5.1": false, "198.18.6.1": true, "2001:db8:5::1": false, "2001:db8:6::1": true,
		}},
		{"ipv6 ::/0 does not cover ipv4", prefixes("198.18.7.0/24"), prefixes("::/0"), map[string]bool{
			"198.18.7.1": true, "198.18.8.1": false, "2001:db8::1": false,
		}},
		{"ipv6 ::/0 deny, ipv4 default allow", nil, prefixes("::/0"), map[string]bool{
			"198.18.8.1": true, "2001:db8::1": false,
		}},
		{"ipv4 /0 and /32", prefixes("0.0.0.0/0"), prefixes("198.18.9.9/32"), map[string]bool{
			"198.18.9.9": false, "198.18.9.8": true, "2001:db8::1": false,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newCTEnv(t)
			acl := mustACL(t, c.allow, c.deny)
			guardVIP(t, e, vip4TCP, 0, VIPEntry{ACL: acl})
			guardVIP(t, e, vip6, 2, VIPEntry{ACL: acl})
			for addr, allowed := range c.clients {
				if acl.Allowed(netip.MustParseAddr(addr)) != allowed {
					t.Fatalf("case table disagrees with guard.ACL on %s", addr)
				}
				v, idx := vip4TCP, uint32(0)
				if netip.MustParseAddr(addr).Is6() {
					v, idx = vip6, 2
				}
				f := flowFrom(addr, 40000, v)
				vs0, _ := e.lb.VIPStats(idx)
				var got uint32
				d := counterDelta(t, e.lb, func() { got = e.send(t, f, thSYN) })
				vs1, _ := e.lb.VIPStats(idx)
				if allowed {
					if got != 1 {
						t.Errorf("%s: not forwarded, want allowed (counters %v)", addr, nonZero(d))
					}
					continue
				}
				if got != 0 {
					t.Errorf("%s: forwarded, want dropped", addr)
				}
				onlyCounters(t, d, CounterDropACL)
				if vs1.ACLDrops != vs0.ACLDrops+1 || vs1.Drops != vs0.Drops+1 {
					t.Errorf("%s: vip stats %+v -> %+v, want one more acl drop", addr, vs0, vs1)
				}
				if _, tracked := e.entry(t, f); tracked {
					t.Errorf("%s: denied flow entered the conntrack", addr)
				}
			}
		})
	}
}

// TestACLReload: a changed list rewrites only its VIP's networks; an
// established flow of a client denied since keeps going (counted), its
// new connections (SYN) and untracked flows are dropped; removing the
// list empties the VIP's part of the trie and lets everyone in.
func TestACLReload(t *testing.T) {
	e := newCTEnv(t)
	other := mustACL(t, nil, prefixes("198.18.60.0/24"))
	guardVIP(t, e, vip4UDP, 1, VIPEntry{ACL: other})
	guardVIP(t, e, vip4TCP, 0, VIPEntry{ACL: mustACL(t, prefixes("198.18.50.0/24"), nil)})

	est := flowFrom("198.18.50.5", 40000, vip4TCP)
	if e.send(t, est, thSYN) != 1 || e.send(t, est, thACK) != 1 {
		t.Fatal("allowed client not forwarded")
	}
	// The reload denies 198.18.50.5 and allows 198.18.51.0/24.
	must(t, e.lb.SetVIP(vip4TCP, VIPEntry{Index: 0, Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple,
		ACL: mustACL(t, prefixes("198.18.51.0/24"), prefixes("198.18.50.5/32"))}))
	rules, err := e.lb.ACLRules(0)
	must(t, err)
	want := []guard.Rule{{Net: netip.MustParsePrefix("198.18.51.0/24"), Allowed: true}, {Net: netip.MustParsePrefix("198.18.50.5/32")}}
	sortRules(rules)
	sortRules(want)
	if !slices.Equal(rules, want) {
		t.Errorf("trie holds %v, want %v", rules, want)
	}
	if r1, _ := e.lb.ACLRules(1); len(r1) != 1 {
		t.Errorf("the other VIP's networks changed: %v", r1)
	}
	d := counterDelta(t, e.lb, func() {
		if e.send(t, est, thACK) != 1 {
			t.Error("established flow of a newly denied client cut")
		}
	})
	if d[CounterACLEstablished] != 1 {
		t.Errorf("counters %v, want acl_denied_established", nonZero(d))
	}
	if e.send(t, est, thSYN) != 0 {
		t.Error("SYN of a denied client forwarded")
	}
	fresh := est
	fresh.Src = netip.AddrPortFrom(est.Src.Addr(), 40001)
	if e.send(t, fresh, thACK) != 0 {
		t.Error("untracked flow of a denied client forwarded")
	}
	if e.send(t, flowFrom("198.18.51.9", 1, vip4TCP), thSYN) != 1 {
		t.Error("newly allowed client dropped")
	}
	// No list: everyone, and no networks left under index 0.
	must(t, e.lb.SetVIP(vip4TCP, VIPEntry{Index: 0, Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple}))
	if r, _ := e.lb.ACLRules(0); len(r) != 0 {
		t.Errorf("networks left after the list was removed: %v", r)
	}
	if e.send(t, fresh, thSYN) != 1 {
		t.Error("client dropped without a list")
	}
	must(t, e.lb.DeleteVIP(vip4UDP))
	if r, _ := e.lb.ACLRules(1); len(r) != 0 {
		t.Errorf("networks left after DeleteVIP: %v", r)
	}
}

func sortRules(r []guard.Rule) {
	slices.SortFunc(r, func(a, b guard.Rule) int { return a.Net.Addr().Compare(b.Net.Addr()) })
}

// TestGuardOnly: a proxy VIP's packets meet the guards and pass byte for
// byte when allowed; a denied client's SYN and datagram are dropped, its
// other TCP segments (an established connection, the kernel's) pass; an
// ICMP error quoting the VIP's flow passes; other traffic is untouched.
func TestGuardOnly(t *testing.T) {
	e := newCTEnv(t)
	acl := mustACL(t, nil, prefixes("198.18.66.0/24", "2001:db8:66::/48"))
	proxyTCP := l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.100.2:443"), Proto: l4.TCP}
	proxyUDP := l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.100.2:53"), Proto: l4.UDP}
	proxy6 := l4.VIPKey{Addr: netip.MustParseAddrPort("[2001:db8:100::2]:443"), Proto: l4.TCP}
	for i, v := range []l4.VIPKey{proxyTCP, proxyUDP, proxy6} {
		must(t, e.lb.SetVIP(v, VIPEntry{Index: uint32(10 + i), GuardOnly: true, ACL: acl}))
	}
	bad4, bad6 := "198.18.66.1", "2001:db8:66::1"
	quote := reply(flowFrom(bad4, 5555, proxyTCP), nil)
	cases := []struct {
		name  string
		frame []byte
		want  uint32
		ctr   Counter
	}{
		{"allowed syn", frame(flowFrom("198.18.50.5", 1, proxyTCP), thSYN), xdpPass, CounterPassGuarded},
		{"allowed ack", frame(flowFrom("198.18.50.5", 1, proxyTCP), thACK), xdpPass, CounterPassGuarded},
		{"allowed udp", frame(flowFrom("198.18.50.5", 1, proxyUDP), 0), xdpPass, CounterPassGuarded},
		{"allowed v6 syn", frame(flowFrom("2001:db8:50::5", 1, proxy6), thSYN), xdpPass, CounterPassGuarded},
		{"denied syn", frame(flowFrom(bad4, 1, proxyTCP), thSYN), xdpDrop, CounterDropACL},
		{"denied v6 syn", frame(flowFrom(bad6, 1, proxy6), thSYN), xdpDrop, CounterDropACL},
		{"denied udp", frame(flowFrom(bad4, 1, proxyUDP), 0), xdpDrop, CounterDropACL},
		{"denied ack (established)", frame(flowFrom(bad4, 1, proxyTCP), thACK), xdpPass, CounterPassGuarded},
		{"icmp quoting a denied flow", frameOf(icmpError(netip.MustParseAddr("198.18.0.254"), proxyTCP.Addr.Addr(), quote), 0, 0), xdpPass, CounterPassGuarded},
		{"other port", frame(flowFrom(bad4, 1, l4.VIPKey{Addr: netip.AddrPortFrom(proxyTCP.Addr.Addr(), 22), Proto: l4.TCP}), thSYN), xdpPass, CounterPassNotVIP},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ret uint32
			var out []byte
			d := counterDelta(t, e.lb, func() { ret, out = e.r.run(t, c.frame) })
			if ret != c.want {
				t.Fatalf("verdict %s, want %s", verdictName(ret), verdictName(c.want))
			}
			onlyCounters(t, d, c.ctr)
			if c.want == xdpPass {
				sameBytes(t, "passed frame", out[:len(c.frame)], c.frame)
			}
		})
	}
	if n := mapLen(t, e.lb.objs.Conntrack); n != 0 {
		t.Errorf("guard-only VIP wrote %d conntrack entries", n)
	}
	if vs, _ := e.lb.VIPStats(10); vs.ACLDrops != 1 || vs.Packets != 0 {
		t.Errorf("proxy vip stats %+v, want 1 acl drop", vs)
	}
}

func frame(f l4.Flow, flags uint8) []byte {
	fr, _ := frameSpec{flow: f, flags: flags}.build()
	return fr
}

// TestSYNRate: N+k SYNs from one source within a second: k dropped; another
// source, ACKs and UDP are not affected; guard-only VIPs share the source's
// budget; rate 0 keeps no state.
func TestSYNRate(t *testing.T) {
	const rate, extra = 10, 5
	e := newCTEnv(t)
	proxyTCP := l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.100.2:443"), Proto: l4.TCP}
	must(t, e.lb.SetVIP(proxyTCP, VIPEntry{Index: 10, GuardOnly: true}))

	// Off: no state at all.
	for i := range rate + extra {
		if e.send(t, flowFrom("198.18.50.5", uint16(1000+i), vip4TCP), thSYN) != 1 {
			t.Fatal("SYN dropped with the guard off")
		}
	}
	if n := mapLen(t, e.lb.objs.SynSources); n != 0 {
		t.Fatalf("guard off, %d source states", n)
	}

	must(t, e.lb.SetSYNRate(rate))
	dropped := 0
	d := counterDelta(t, e.lb, func() {
		for i := range rate + extra {
			var ok bool
			if i%2 == 0 {
				ok = e.send(t, flowFrom("198.18.50.6", uint16(2000+i), vip4TCP), thSYN) == 1
			} else {
				ret, _ := e.r.run(t, frame(flowFrom("198.18.50.6", uint16(2000+i), proxyTCP), thSYN))
				ok = ret == xdpPass
			}
			if !ok {
				dropped++
			}
		}
	})
	// The program's clock may tick on during the loop (a slow, shared
	// machine): allow one more admitted SYN per 100 ms it could take.
	if dropped < extra-1 || dropped > extra {
		t.Errorf("%d of %d SYNs dropped, want %d", dropped, rate+extra, extra)
	}
	if d[CounterDropSYNRate] != uint64(dropped) {
		t.Errorf("drop_syn_rate %d, want %d", d[CounterDropSYNRate], dropped)
	}
	vs, _ := e.lb.VIPStats(0)
	ps, _ := e.lb.VIPStats(10)
	if vs.SYNRateDrops+ps.SYNRateDrops != uint64(dropped) {
		t.Errorf("per-VIP syn drops %d+%d, want %d", vs.SYNRateDrops, ps.SYNRateDrops, dropped)
	}
	// The same source's ACKs and datagrams pass; another source's SYNs too.
	if e.send(t, flowFrom("198.18.50.6", 2000, vip4TCP), thACK) != 1 {
		t.Error("ACK of a rate-limited source dropped")
	}
	if e.send(t, flowFrom("198.18.50.6", 2000, vip4UDP), 0) != 1 {
		t.Error("datagram of a rate-limited source dropped")
	}
	if e.send(t, flowFrom("198.18.50.6", 3000, vip4TCP), thSYN|thACK) != 1 {
		t.Error("SYN-ACK taken for a SYN")
	}
	for i := range rate {
		if e.send(t, flowFrom("2001:db8:50::7", uint16(i), vip6TCPOn(t, e)), thSYN) != 1 {
			t.Fatalf("another source's SYN %d dropped", i)
		}
	}
	// Off again: nothing dropped, whatever the state says.
	must(t, e.lb.SetSYNRate(0))
	if e.send(t, flowFrom("198.18.50.6", 4000, vip4TCP), thSYN) != 1 {
		t.Error("SYN dropped after the guard was turned off")
	}
}

// vip6TCPOn makes vip6TCP an l2 VIP of e at index 2 (once).
func vip6TCPOn(t *testing.T, e *ctEnv) l4.VIPKey {
	if _, err := e.lb.LookupVIP(vip6TCP); err != nil {
		guardVIP(t, e, vip6TCP, 2, VIPEntry{})
	}
	return vip6TCP
}

// TestNewFlowRate: under the VIP's new_flow_rate flows are tracked; over it
// they are still forwarded by the table but never enter the conntrack, and
// are counted; flows already tracked are not affected.
func TestNewFlowRate(t *testing.T) {
	const rate, extra = 8, 4
	e := newCTEnv(t)
	guardVIP(t, e, vip4TCP, 0, VIPEntry{NewFlowRate: rate})
	if got, _ := e.lb.LookupVIP(vip4TCP); got.NewFlowRate != rate {
		t.Errorf("read back new_flow_rate %d, want %d", got.NewFlowRate, rate)
	}
	var tracked, untracked []l4.Flow
	d := counterDelta(t, e.lb, func() {
		for i := range rate + extra {
			f := flowFrom("198.18.50.5", uint16(5000+i), vip4TCP)
			if e.send(t, f, thSYN) != 1 {
				t.Fatalf("flow %d not forwarded", i)
			}
			if _, ok := e.entry(t, f); ok {
				tracked = append(tracked, f)
			} else {
				untracked = append(untracked, f)
			}
		}
	})
	if len(untracked) < extra-1 || len(untracked) > extra {
		t.Errorf("%d flows tracked, %d untracked; want %d untracked", len(tracked), len(untracked), extra)
	}
	if d[CounterCTUntracked] != uint64(len(untracked)) || d[CounterCTNew] != uint64(len(tracked)) {
		t.Errorf("counters %v; want %d untracked, %d new", nonZero(d), len(untracked), len(tracked))
	}
	vs, _ := e.lb.VIPStats(0)
	if vs.Untracked != uint64(len(untracked)) || vs.NewFlows != uint64(len(tracked)) {
		t.Errorf("vip stats %+v", vs)
	}
	// A tracked flow keeps its entry and backend while the rate is spent.
	e.table(t, 0, 2)
	if e.send(t, tracked[0], thACK) != 1 {
		t.Error("tracked flow lost its backend while the VIP is over its rate")
	}
	// Another VIP without a cap tracks everything.
	f := flowFrom("198.18.50.5", 6000, vip4UDP)
	if e.send(t, f, 0) != 1 {
		t.Fatal("udp not forwarded")
	}
	if _, ok := e.entry(t, f); !ok {
		t.Error("uncapped VIP did not track its flow")
	}
}

// mapLen counts a map's entries.
func mapLen(t testing.TB, m *ebpf.Map) int {
	t.Helper()
	var k, v []byte
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	must(t, it.Err())
	return n
}
