// Explain against the program (BPF_PROG_TEST_RUN): the backend it
// predicts is the one the packet then goes to, for new flows, established
// ones, SYNs over an entry and stale entries; and it moves no counter.

package bpf

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// explainEnv is an l2 balancer with backends 1..5 (4 inactive) and one
// VIP per protocol and hash key, each with its own random table of 1009
// slots over 1..5 and a few empty slots.
func explainEnv(t *testing.T, rng *rand.Rand) (*LB, runner, []l4.VIPKey) {
	lb := newTestLB(t, testOptions)
	for i := uint32(1); i <= 5; i++ {
		must(t, lb.SetBackend(i, BackendEntry{Addr: netip.MustParseAddr("198.18.0.11"), MAC: macFor(i), Active: i != 4}))
	}
	var vips []l4.VIPKey
	index := uint32(0)
	for _, key := range []l4.HashKey{l4.HashSrcIP, l4.HashSrcIPPort, l4.HashFiveTuple} {
		for _, proto := range []l4.Protocol{l4.TCP, l4.UDP} {
			v := l4.VIPKey{Addr: netip.AddrPortFrom(netip.MustParseAddr("198.18.100.1"), 1000+uint16(index)), Proto: proto}
			table := make([]uint32, 1009)
			for s := range table {
				table[s] = rng.Uint32N(6) // 0: an empty slot
			}
			addVIP(t, lb, v, index, l4.ForwardL2, key, table)
			vips = append(vips, v)
			index++
		}
	}
	return lb, runner{prog: lb.objs.XdpLb}, vips
}

// sendTo runs one packet of f and returns the backend it went to (0: not
// forwarded).
func sendTo(t *testing.T, r runner, f l4.Flow, flags uint8) uint32 {
	t.Helper()
	frame, _ := frameSpec{flow: f, flags: flags}.build()
	ret, out := r.run(t, frame)
	if ret != xdpTX {
		return 0
	}
	return indexOfMAC(out[:6])
}

func mustExplain(t *testing.T, lb *LB, f l4.Flow) Path {
	t.Helper()
	p, err := lb.Explain(f)
	if err != nil {
		t.Fatalf("explain %v: %v", f, err)
	}
	return p
}

func TestExplainMatchesProgram(t *testing.T) {
	seed := uint64(20260602)
	rng := rand.New(rand.NewPCG(seed, seed))
	lb, r, vips := explainEnv(t, rng)
	for _, v := range vips {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			for range 200 {
				f := l4.Flow{Src: netip.AddrPortFrom(randAddr(rng, false), randPort(rng)), Dst: v.Addr, Proto: v.Proto}
				flags := uint8(thSYN)
				if v.Proto == l4.UDP {
					flags = 0
				}
				p := mustExplain(t, lb, f)
				if p.Flow != nil || p.TableSize != 1009 {
					t.Fatalf("seed %d: new flow %v: %+v", seed, f, p)
				}
				want := p.Backend(flags == thSYN)
				if got := sendTo(t, r, f, flags); got != want {
					t.Fatalf("seed %d: %v: explained backend %d (slot %d holds %d), the program sent it to %d", seed, f, want, p.Slot, p.SlotBackend, got)
				}
				if want == 0 {
					continue // dropped: no entry
				}
				after := mustExplain(t, lb, f)
				if after.Flow == nil || after.Flow.Backend != want || !after.FlowUsable || after.Backend(false) != want {
					t.Fatalf("seed %d: %v after its first packet: %+v", seed, f, after)
				}
			}
		})
	}
}

// TestExplainEstablishedAndStale: an entry keeps its flow off a moved
// table, a SYN takes the table's slot, an inactive backend's entry is
// stale; each as the program then does.
func TestExplainEstablishedAndStale(t *testing.T) {
	e := newCTEnv(t)
	f := flowTo(vip4TCP)
	wantBackend(t, "syn", e.send(t, f, thSYN), 1)
	e.table(t, 0, 2)
	p := mustExplain(t, e.lb, f)
	if p.Flow == nil || !p.FlowUsable || p.Backend(false) != 1 || p.Backend(true) != 2 || p.SlotBackend != 2 || p.TableSize != 3 {
		t.Fatalf("established over a moved table: %+v", p)
	}
	wantBackend(t, "ack", e.send(t, f, thACK), p.Backend(false))
	// Explaining moves no counter and leaves the entry's time alone.
	before, _ := e.entry(t, f)
	d := counterDelta(t, e.lb, func() {
		for range 10 {
			mustExplain(t, e.lb, f)
		}
	})
	onlyCounters(t, d)
	if after, _ := e.entry(t, f); after != before {
		t.Fatalf("entry %+v became %+v", before, after)
	}
	// Backend 1 inactive: the entry is stale, packets rehash to 2.
	must(t, e.lb.SetBackend(1, BackendEntry{Addr: netip.MustParseAddr("198.18.0.11"), MAC: macFor(1)}))
	p = mustExplain(t, e.lb, f)
	if p.FlowUsable || p.Backend(false) != 2 {
		t.Fatalf("stale entry: %+v", p)
	}
	wantBackend(t, "ack on a stale entry", e.send(t, f, thACK), 2)
	wantBackend(t, "syn", e.send(t, f, thSYN), mustExplain(t, e.lb, f).Backend(true))
	if _, err := e.lb.Explain(l4.Flow{Src: client4, Dst: netip.MustParseAddrPort("198.18.100.9:80"), Proto: l4.TCP}); err == nil {
		t.Fatal("explained a flow to no VIP")
	}
}
