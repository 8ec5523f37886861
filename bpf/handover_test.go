// A VIP whose mode a reload changes (VIPEntry.ConntrackOnly and
// KernelFlows), through BPF_PROG_TEST_RUN.

package bpf

import (
	"bytes"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// passes sends a packet of f and wants it passed to the kernel byte for
// byte, counted pass_handover, the conntrack entry (present or not) as
// tracked says.
func (e *ctEnv) passes(t *testing.T, what string, f l4.Flow, flags uint8, tracked bool) {
	t.Helper()
	frame, _ := frameSpec{flow: f, flags: flags}.build()
	var ret uint32
	var out []byte
	d := counterDelta(t, e.lb, func() { ret, out = e.r.run(t, frame) })
	if ret != xdpPass || !bytes.Equal(out, frame) {
		t.Errorf("%s: verdict %d (frame changed: %v), want XDP_PASS untouched", what, ret, !bytes.Equal(out, frame))
	}
	onlyCounters(t, d, CounterPassHandover)
	if _, ok := e.entry(t, f); ok != tracked {
		t.Errorf("%s: in the conntrack %v, want %v", what, ok, tracked)
	}
}

// TestHandoverConntrackOnly: an xdp VIP that a reload moves to proxy mode
// keeps forwarding the flows its conntrack holds, TCP and UDP, to their
// backends (its table is no longer read: they keep them); a SYN (also on
// a held 4-tuple, whose entry goes, so the new connection's later
// segments pass too) and any packet of a flow it does not hold pass to
// the kernel untouched. Cleared, the VIP balances new flows again.
func TestHandoverConntrackOnly(t *testing.T) {
	e := newCTEnv(t)
	tcp, udp := flowFrom("198.18.70.1", 40000, vip4TCP), flowFrom("198.18.70.1", 5353, vip4UDP)
	wantBackend(t, "tcp syn", e.send(t, tcp, thSYN), 1)
	wantBackend(t, "udp", e.send(t, udp, 0), 1)
	for i, v := range []l4.VIPKey{vip4TCP, vip4UDP} {
		must(t, e.lb.SetVIP(v, VIPEntry{Index: uint32(i), Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple, ConntrackOnly: true}))
		e.table(t, uint32(i), 2) // a table pointing elsewhere changes nothing
	}
	if got, err := e.lb.LookupVIP(vip4TCP); err != nil || !got.ConntrackOnly || got.KernelFlows {
		t.Fatalf("read back %+v, %v: want ConntrackOnly", got, err)
	}
	d := counterDelta(t, e.lb, func() {
		wantBackend(t, "established ack", e.send(t, tcp, thACK), 1)
		wantBackend(t, "established fin", e.send(t, tcp, thFIN|thACK), 1)
		wantBackend(t, "udp session", e.send(t, udp, 0), 1)
	})
	if d[CounterPassHandover] != 0 || d[CounterCTHit] != 3 {
		t.Errorf("established flows: counters %v, want 3 conntrack hits", nonZero(d))
	}
	fresh := flowFrom("198.18.70.2", 40001, vip4TCP)
	e.passes(t, "new syn", fresh, thSYN, false)
	e.passes(t, "ack of a connection the kernel holds", fresh, thACK, false)
	e.passes(t, "new udp flow", flowFrom("198.18.70.2", 5353, vip4UDP), 0, false)
	e.passes(t, "syn reusing an established 4-tuple", tcp, thSYN, false)
	e.passes(t, "its ack", tcp, thACK, false)

	must(t, e.lb.SetVIP(vip4TCP, VIPEntry{Index: 0, Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple}))
	wantBackend(t, "syn once cleared", e.send(t, fresh, thSYN), 2)
}

// TestHandoverKernelFlows: an xdp VIP that a reload brings from proxy
// mode passes a TCP segment other than a SYN that its conntrack does not
// hold (a proxy connection: ACK, FIN, RST, data) to the kernel untouched
// and pins nothing; SYNs are balanced and pinned, so their connections'
// later segments are forwarded; UDP is balanced as always. Without the
// flag the same segment is balanced: the proxy's connection would go to
// a backend that knows nothing of it.
func TestHandoverKernelFlows(t *testing.T) {
	e := newCTEnv(t)
	for i, v := range []l4.VIPKey{vip4TCP, vip4UDP} {
		must(t, e.lb.SetVIP(v, VIPEntry{Index: uint32(i), Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple, KernelFlows: true}))
	}
	if got, err := e.lb.LookupVIP(vip4TCP); err != nil || !got.KernelFlows || got.ConntrackOnly {
		t.Fatalf("read back %+v, %v: want KernelFlows", got, err)
	}
	proxied := flowFrom("198.18.71.1", 40000, vip4TCP)
	for _, fl := range []struct {
		what  string
		flags uint8
	}{{"ack", thACK}, {"data", thACK | 0x08}, {"fin", thFIN | thACK}, {"rst", thRST}, {"syn-ack", thSYN | thACK}} {
		e.passes(t, "proxy connection's "+fl.what, proxied, fl.flags, false)
	}
	fresh := flowFrom("198.18.71.2", 40001, vip4TCP)
	wantBackend(t, "new syn", e.send(t, fresh, thSYN), 1)
	wantBackend(t, "its ack", e.send(t, fresh, thACK), 1)
	wantBackend(t, "udp", e.send(t, flowFrom("198.18.71.2", 5353, vip4UDP), 0), 1)

	must(t, e.lb.SetVIP(vip4TCP, VIPEntry{Index: 0, Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple}))
	wantBackend(t, "untracked ack without the flag", e.send(t, proxied, thACK), 1)
}
