// Conntrack rules: hits keep their backend, SYN rehashes, RST deletes, FIN
// marks, stale backends rehash; purges, flow counts and the 1 s refresh.

package bpf

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// ctEnv is an l2 balancer with backends 1 and 2 and vip4TCP/vip4UDP at
// indices 0/1, all slots on backend 1.
type ctEnv struct {
	lb *LB
	r  runner
}

func newCTEnv(t *testing.T) *ctEnv {
	lb := newTestLB(t, testOptions)
	addBackend(t, lb, 1, netip.MustParseAddr("198.18.0.11"))
	addBackend(t, lb, 2, netip.MustParseAddr("198.18.0.12"))
	addVIP(t, lb, vip4TCP, 0, l4.ForwardL2, l4.HashFiveTuple, []uint32{1})
	addVIP(t, lb, vip4UDP, 1, l4.ForwardL2, l4.HashFiveTuple, []uint32{1})
	return &ctEnv{lb: lb, r: runner{prog: lb.objs.XdpLb}}
}

// send sends a packet of f with TCP flags and returns the backend index
// it went to (0 if not forwarded).
func (e *ctEnv) send(t *testing.T, f l4.Flow, flags uint8) uint32 {
	t.Helper()
	frame, _ := frameSpec{flow: f, flags: flags}.build()
	ret, out := e.r.run(t, frame)
	if ret != xdpTX {
		return 0
	}
	return indexOfMAC(out[:6])
}

// table points every slot of index at backend b.
func (e *ctEnv) table(t *testing.T, index, b uint32) {
	t.Helper()
	must(t, e.lb.SetMaglev(index, []uint32{b, b, b}))
}

func (e *ctEnv) entry(t *testing.T, f l4.Flow) (FlowEntry, bool) {
	t.Helper()
	fe, err := e.lb.LookupFlow(f)
	if errors.Is(err, ErrNotFound) {
		return fe, false
	}
	must(t, err)
	return fe, true
}

func wantBackend(t *testing.T, what string, got, want uint32) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: backend %d, want %d", what, got, want)
	}
}

// TestConntrackKeepsBackend: an established flow stays on its backend when
// the Maglev table moves away from it, until PurgeBackend; then it follows
// the table.
func TestConntrackKeepsBackend(t *testing.T) {
	e := newCTEnv(t)
	f := flowTo(vip4TCP)
	wantBackend(t, "syn", e.send(t, f, thSYN), 1)
	e.table(t, 0, 2)
	wantBackend(t, "ack after table change", e.send(t, f, thACK), 1)
	d := counterDelta(t, e.lb, func() { e.send(t, f, thACK|thPSH) })
	onlyCounters(t, d, CounterCTHit, CounterTX)
	n, err := e.lb.PurgeBackend(1)
	must(t, err)
	if n != 1 {
		t.Fatalf("purged %d, want 1", n)
	}
	wantBackend(t, "ack after purge", e.send(t, f, thACK), 2)
	if fe, ok := e.entry(t, f); !ok || fe.Backend != 2 {
		t.Fatalf("entry after purge %+v %v, want backend 2", fe, ok)
	}
}

// TestConntrackSynRehashes: a SYN without ACK takes the table's choice and
// overwrites the entry; a SYN-ACK does not.
func TestConntrackSynRehashes(t *testing.T) {
	e := newCTEnv(t)
	f := flowTo(vip4TCP)
	wantBackend(t, "syn", e.send(t, f, thSYN), 1)
	e.table(t, 0, 2)
	wantBackend(t, "syn-ack", e.send(t, f, thSYN|thACK), 1)
	d := counterDelta(t, e.lb, func() { wantBackend(t, "second syn", e.send(t, f, thSYN), 2) })
	onlyCounters(t, d, CounterCTSyn, CounterTX)
	if fe, _ := e.entry(t, f); fe.Backend != 2 {
		t.Fatalf("entry backend %d after syn, want 2", fe.Backend)
	}
}

// TestConntrackRSTDeletes: an RST is forwarded to the flow's backend and
// deletes the entry; an RST without entry is forwarded and not inserted.
func TestConntrackRSTDeletes(t *testing.T) {
	e := newCTEnv(t)
	f := flowTo(vip4TCP)
	e.send(t, f, thSYN)
	e.table(t, 0, 2)
	d := counterDelta(t, e.lb, func() { wantBackend(t, "rst", e.send(t, f, thRST|thACK), 1) })
	onlyCounters(t, d, CounterCTHit, CounterCTRst, CounterTX)
	if _, ok := e.entry(t, f); ok {
		t.Fatal("entry survived the RST")
	}
	wantBackend(t, "stray rst", e.send(t, f, thRST), 2)
	if _, ok := e.entry(t, f); ok {
		t.Fatal("a stray RST inserted an entry")
	}
}

// TestConntrackFIN: a FIN marks the entry closing; the flow keeps its
// backend; closing flows are not live.
func TestConntrackFIN(t *testing.T) {
	e := newCTEnv(t)
	f := flowTo(vip4TCP)
	e.send(t, f, thSYN)
	if fe, _ := e.entry(t, f); fe.Closing {
		t.Fatal("closing before FIN")
	}
	e.table(t, 0, 2)
	wantBackend(t, "fin", e.send(t, f, thFIN|thACK), 1)
	if fe, _ := e.entry(t, f); !fe.Closing || fe.Backend != 1 {
		t.Fatalf("after FIN: %+v, want closing on 1", fe)
	}
	counts := make([]uint64, 4)
	n, err := e.lb.FlowCounts(MonotonicNow(), time.Minute, counts)
	must(t, err)
	if n != 0 || counts[1] != 0 {
		t.Fatalf("live flows %d %v, want none", n, counts)
	}
}

// TestConntrackStaleBackend: a hit on a backend that went inactive or was
// deleted counts as a miss: the flow moves to the table's choice.
func TestConntrackStaleBackend(t *testing.T) {
	for _, how := range []string{"inactive", "deleted"} {
		t.Run(how, func(t *testing.T) {
			e := newCTEnv(t)
			f := flowTo(vip4UDP)
			wantBackend(t, "first", e.send(t, f, 0), 1)
			e.table(t, 1, 2)
			if how == "inactive" {
				must(t, e.lb.SetBackend(1, BackendEntry{Addr: netip.MustParseAddr("198.18.0.11"), MAC: macFor(1)}))
			} else {
				must(t, e.lb.DeleteBackend(1))
			}
			d := counterDelta(t, e.lb, func() { wantBackend(t, "after", e.send(t, f, 0), 2) })
			onlyCounters(t, d, CounterCTStale, CounterCTNew, CounterTX)
		})
	}
}

// TestConntrackUDP: the first datagram inserts, the next hit.
func TestConntrackUDP(t *testing.T) {
	e := newCTEnv(t)
	f := flowTo(vip4UDP)
	d := counterDelta(t, e.lb, func() { e.send(t, f, 0) })
	onlyCounters(t, d, CounterCTNew, CounterTX)
	d = counterDelta(t, e.lb, func() { e.send(t, f, 0) })
	onlyCounters(t, d, CounterCTHit, CounterTX)
}

// TestConntrackRefresh: a hit rewrites last_seen only when it is a second
// old, so busy flows do not write their entry on every packet.
func TestConntrackRefresh(t *testing.T) {
	e := newCTEnv(t)
	f := flowTo(vip4UDP)
	e.send(t, f, 0)
	fe, _ := e.entry(t, f)
	time.Sleep(30 * time.Millisecond) // past a tick of the coarse clock
	e.send(t, f, 0)
	if fe2, _ := e.entry(t, f); fe2.LastSeen != fe.LastSeen {
		t.Fatalf("last seen moved within a second: %v -> %v", fe.LastSeen, fe2.LastSeen)
	}
	k := flowKeyOf(f)
	old := lbFlowState{LastSeen: uint64(MonotonicNow() - 2*time.Second), Backend: 1}
	must(t, e.lb.objs.Conntrack.Put(&k, &old))
	e.send(t, f, 0)
	// The coarse clock lags by up to a tick; a refresh moves it ~2 s.
	if fe3, _ := e.entry(t, f); fe3.LastSeen < time.Duration(old.LastSeen)+time.Second {
		t.Fatalf("last seen %v not refreshed from %v", fe3.LastSeen, time.Duration(old.LastSeen))
	}
}

// TestFlowCounts: per-backend live counts, the idle cutoff, PurgeVIP
// (which keeps a TCP VIP on the purged UDP VIP's address and port).
func TestFlowCounts(t *testing.T) {
	e := newCTEnv(t)
	e.table(t, 1, 2)
	tcp53 := l4.VIPKey{Addr: vip4UDP.Addr, Proto: l4.TCP}
	addVIP(t, e.lb, tcp53, 2, l4.ForwardL2, l4.HashFiveTuple, []uint32{1})
	for p := range uint16(30) {
		f := flowTo(vip4TCP)
		f.Src = netip.AddrPortFrom(f.Src.Addr(), 1000+p)
		e.send(t, f, thSYN)
		f.Dst = vip4UDP.Addr
		if p < 5 {
			e.send(t, f, thSYN) // tcp53
		}
		f.Proto = l4.UDP
		if p < 20 {
			e.send(t, f, 0)
		}
	}
	counts := make([]uint64, 3)
	n, err := e.lb.FlowCounts(MonotonicNow(), time.Minute, counts)
	must(t, err)
	if n != 55 || counts[1] != 35 || counts[2] != 20 {
		t.Fatalf("counts %d %v, want 55 [0 35 20]", n, counts)
	}
	n, err = e.lb.FlowCounts(MonotonicNow()+2*time.Minute, time.Minute, counts)
	must(t, err)
	if n != 0 {
		t.Fatalf("idle flows counted: %d %v", n, counts)
	}
	purged, err := e.lb.PurgeVIP(vip4UDP)
	must(t, err)
	if purged != 20 {
		t.Fatalf("purged %d, want 20", purged)
	}
	seen := 0
	must(t, e.lb.Flows(func(f l4.Flow, fe FlowEntry) bool {
		seen++
		if f.Proto != l4.TCP || fe.Backend != 1 {
			t.Errorf("flow %v %+v after purging udp", f, fe)
		}
		return true
	}))
	if seen != 35 {
		t.Fatalf("saw %d flows, want 35", seen)
	}
}

// TestFlowCountsManyBatches: a walk allocates a small constant whether it
// crosses 6 batches or 12: nothing per entry or per batch.
func TestFlowCountsManyBatches(t *testing.T) {
	opts := testOptions
	opts.ConntrackSize = 16384 // the LRU evicts early when nearly full
	e := &ctEnv{lb: newTestLB(t, opts)}
	counts := make([]uint64, 3)
	var allocs [2]float64
	for round := range allocs {
		for p := range uint16(3000) {
			k := flowKeyOf(l4.Flow{Src: netip.AddrPortFrom(client4.Addr(), uint16(round)*3000+p), Dst: vip4TCP.Addr, Proto: l4.TCP})
			must(t, e.lb.objs.Conntrack.Put(&k, &lbFlowState{LastSeen: uint64(MonotonicNow()), Backend: 1 + uint32(p%2)}))
		}
		now := MonotonicNow()
		var n int
		allocs[round] = testing.AllocsPerRun(5, func() {
			var err error
			if n, err = e.lb.FlowCounts(now, time.Minute, counts); err != nil {
				t.Fatal(err)
			}
		})
		if want := 3000 * (round + 1); n != want || counts[1] != uint64(want/2) || counts[2] != uint64(want/2) {
			t.Fatalf("counts %d %v, want %d split evenly", n, counts, want)
		}
	}
	// 3000 entries take 6 batches, 6000 take 12: anything per batch would
	// add at least 6, anything per entry thousands. The race detector
	// adds an allocation or two now and then, hence the margin.
	if allocs[1]-allocs[0] >= 5 || allocs[1] >= 6000/ctBatchSize {
		t.Fatalf("FlowCounts allocations grow with the table: %.0f at 3000 entries, %.0f at 6000", allocs[0], allocs[1])
	}
	t.Logf("FlowCounts: %.0f allocations per walk at 3000 and 6000 entries", allocs[0])
}
