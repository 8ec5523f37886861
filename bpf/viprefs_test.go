// vip_refs and vip_ports: a conntrack hit takes its VIP from vip_refs by
// the index its entry holds, only while that entry is still the flow's
// VIP, and vip_ports follows the forwarding VIPs' ports.

package bpf

import (
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// rawFlow reads f's conntrack entry as the program wrote it.
func rawFlow(t *testing.T, lb *LB, f l4.Flow) lbFlowState {
	t.Helper()
	k := flowKeyOf(f)
	var st lbFlowState
	must(t, lb.objs.Conntrack.Lookup(&k, &st))
	return st
}

// portBits returns port's (host order) two bits of vip_ports: 1 a
// forwarding VIP uses it, 2 any VIP does.
func portBits(t *testing.T, lb *LB, port uint16) uint64 {
	t.Helper()
	raw := ntohs(port) // as the program reads the packet's bytes natively
	var bits uint64
	must(t, lb.objs.VipPorts.Lookup(uint32(raw>>5), &bits))
	return bits >> (2 * (raw & 31)) & 3
}

// TestVIPRefs: a hit follows the VIP as SetVIP and DeleteVIP leave it: a
// VIP moved to another index still forwards its flows (their entries take
// the new index), an entry naming an index that holds another VIP does
// not get that VIP's settings, a changed VIP (guard only) and a deleted
// one (not a VIP) take effect on established flows at once; vip_ports
// has a port's forwarding bit while a forwarding VIP uses it and its
// any-VIP bit while any VIP does. Another forwarding VIP on the
// same port keeps port 80 in vip_ports throughout, so every hit below
// reads vip_refs first.
func TestVIPRefs(t *testing.T) {
	e := newCTEnv(t)
	other := l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.100.2:80"), Proto: l4.TCP}
	addVIP(t, e.lb, other, 3, l4.ForwardL2, l4.HashFiveTuple, []uint32{2})
	f := flowFrom("198.18.70.9", 40000, vip4TCP)
	wantBackend(t, "syn", e.send(t, f, thSYN), 1)
	wantBackend(t, "ack", e.send(t, f, thACK), 1)
	if st := rawFlow(t, e.lb, f); st.Vip != 0 {
		t.Fatalf("entry names vip %d, want 0", st.Vip)
	}
	if portBits(t, e.lb, vip4TCP.Addr.Port()) != 3 || portBits(t, e.lb, 22) != 0 {
		t.Fatal("vip_ports: want port 80 forwarding, 22 clear")
	}

	// Moved to index 2: the hit finds index 0 empty, looks the VIP up
	// and re-labels the entry.
	must(t, e.lb.SetVIP(vip4TCP, VIPEntry{Index: 2, Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple}))
	e.table(t, 2, 2)
	var ref lbVipRef
	must(t, e.lb.objs.VipRefs.Lookup(uint32(0), &ref))
	if ref != (lbVipRef{}) {
		t.Fatalf("vip_refs[0] after the move: %+v, want zero", ref)
	}
	wantBackend(t, "ack after the move", e.send(t, f, thACK), 1)
	if st := rawFlow(t, e.lb, f); st.Vip != 2 {
		t.Fatalf("entry names vip %d after the move, want 2", st.Vip)
	}

	// An entry naming index 1 (vip4UDP, made guard-only) must not take
	// that VIP's settings: the key does not match.
	must(t, e.lb.SetVIP(vip4UDP, VIPEntry{Index: 1, Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple, GuardOnly: true}))
	k := flowKeyOf(f)
	st := rawFlow(t, e.lb, f)
	st.Vip = 1
	must(t, e.lb.objs.Conntrack.Put(&k, &st))
	wantBackend(t, "ack, entry naming another VIP's index", e.send(t, f, thACK), 1)

	// Guard only now: an established flow passes.
	must(t, e.lb.SetVIP(vip4TCP, VIPEntry{Index: 2, Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple, GuardOnly: true}))
	frame, _ := frameSpec{flow: f, flags: thACK}.build()
	d := counterDelta(t, e.lb, func() {
		if ret, _ := e.r.run(t, frame); ret != xdpPass {
			t.Errorf("guard-only: verdict %s, want XDP_PASS", verdictName(ret))
		}
	})
	onlyCounters(t, d, CounterPassGuarded)

	// Forwarding again, then deleted: the flow passes as not a VIP.
	must(t, e.lb.SetVIP(vip4TCP, VIPEntry{Index: 2, Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple}))
	wantBackend(t, "ack, forwarding again", e.send(t, f, thACK), 1)
	must(t, e.lb.DeleteVIP(vip4TCP))
	d = counterDelta(t, e.lb, func() {
		if ret, _ := e.r.run(t, frame); ret != xdpPass {
			t.Errorf("deleted: verdict %s, want XDP_PASS", verdictName(ret))
		}
	})
	onlyCounters(t, d, CounterPassNotVIP)
	if portBits(t, e.lb, vip4TCP.Addr.Port()) != 3 {
		t.Error("vip_ports: port 80 not forwarding with a forwarding VIP on it")
	}
	must(t, e.lb.SetVIP(other, VIPEntry{Index: 3, Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple, GuardOnly: true}))
	if got := portBits(t, e.lb, vip4TCP.Addr.Port()); got != 2 {
		t.Errorf("vip_ports: port 80 bits %b with only a guard-only VIP on it, want 10", got)
	}
	must(t, e.lb.DeleteVIP(other))
	if got := portBits(t, e.lb, vip4TCP.Addr.Port()); got != 0 {
		t.Errorf("vip_ports: port 80 bits %b with no VIP on it", got)
	}
}
