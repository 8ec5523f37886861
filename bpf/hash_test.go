// Hash agreement: the program picks exactly the slot Go's
// balance.Slot(balance.FlowHash(&f, key), size) predicts.

package bpf

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
)

const agreeSize = 1009

// slotLB is an l2 balancer whose backends 1..agreeSize sit in slot
// index-1 of every VIP's table: the output's MAC names the slot.
func slotLB(t *testing.T) (*LB, runner) {
	lb := newTestLB(t, Options{ConntrackSize: 4096, MaxVIPs: 64, MaxBackends: 2048})
	table := make([]uint32, agreeSize)
	for s := range table {
		table[s] = uint32(s + 1)
		addBackend(t, lb, uint32(s+1), netip.MustParseAddr("198.18.0.1"))
	}
	return lb, runner{prog: lb.objs.XdpLb}
}

// slotOf sends one packet of f and returns the slot it went to.
func slotOf(t *testing.T, r runner, f l4.Flow) int {
	t.Helper()
	frame, _ := frameSpec{flow: f, flags: thSYN}.build()
	ret, out := r.run(t, frame)
	if ret != xdpTX {
		t.Fatalf("%v: verdict %s", f, verdictName(ret))
	}
	return int(indexOfMAC(out[:6])) - 1
}

func randAddr(rng *rand.Rand, v6 bool) netip.Addr {
	if !v6 {
		return netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
	}
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if b[0] == 0 && b[1] == 0 { // keep clear of ::ffff:0:0/96, which is IPv4
		b[0] = 0x20
	}
	return netip.AddrFrom16(b)
}

func randPort(rng *rand.Rand) uint16 { return uint16(rng.Uint32()) }

// TestHashAgreement: thousands of random flows, both families, both
// protocols, every hash key: the program's slot equals Go's.
func TestHashAgreement(t *testing.T) {
	lb, r := slotLB(t)
	seed := uint64(20260601)
	rng := rand.New(rand.NewPCG(seed, seed))
	const perCase = 1000
	index := uint32(0)
	for _, key := range []l4.HashKey{l4.HashSrcIP, l4.HashSrcIPPort, l4.HashFiveTuple} {
		for _, v6 := range []bool{false, true} {
			for _, proto := range []l4.Protocol{l4.TCP, l4.UDP} {
				vip := l4.VIPKey{Addr: netip.AddrPortFrom(randAddr(rng, v6), randPort(rng)), Proto: proto}
				table := make([]uint32, agreeSize)
				for s := range table {
					table[s] = uint32(s + 1)
				}
				addVIP(t, lb, vip, index, l4.ForwardL2, key, table)
				index++
				t.Run(fmt.Sprintf("%v/%v", key, vip), func(t *testing.T) {
					for range perCase {
						f := l4.Flow{Src: netip.AddrPortFrom(randAddr(rng, v6), randPort(rng)), Dst: vip.Addr, Proto: proto}
						want := balance.Slot(balance.FlowHash(&f, key), agreeSize)
						if got := slotOf(t, r, f); got != want {
							t.Fatalf("seed %d: %v: program slot %d, Go slot %d", seed, f, got, want)
						}
					}
				})
			}
		}
	}
}

// goldenFlows pin balance.FlowHash itself: if Go's hash changes, every
// flow of every hashing VIP moves, so a change must be on purpose (and
// the C moves with it).
var goldenFlows = []struct {
	src, dst string
	proto    l4.Protocol
	key      l4.HashKey
	hash     uint64
	slot     int // of agreeSize
}{
	{"198.18.50.5:40000", "198.18.100.1:80", 6, l4.HashSrcIP, 0xb73e4387234d5d84, 722},
	{"198.18.50.5:40000", "198.18.100.1:80", 6, l4.HashSrcIPPort, 0xf075f8cd86f76bdd, 947},
	{"198.18.50.5:40000", "198.18.100.1:80", 6, l4.HashFiveTuple, 0x10c4434e89d978d3, 66},
	{"10.0.0.1:1", "10.0.0.2:65535", 17, l4.HashSrcIP, 0x7188f7d0cdc6af4e, 447},
	{"10.0.0.1:1", "10.0.0.2:65535", 17, l4.HashSrcIPPort, 0x88557535c5332bdf, 537},
	{"10.0.0.1:1", "10.0.0.2:65535", 17, l4.HashFiveTuple, 0x54f0d34af4ba5874, 334},
	{"[2001:db8:50::5]:40000", "[2001:db8:100::1]:443", 6, l4.HashSrcIP, 0xb9f2e6792d58af09, 732},
	{"[2001:db8:50::5]:40000", "[2001:db8:100::1]:443", 6, l4.HashSrcIPPort, 0x461ec477419b5000, 276},
	{"[2001:db8:50::5]:40000", "[2001:db8:100::1]:443", 6, l4.HashFiveTuple, 0x8c1112737a319f02, 552},
	{"[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", "[::1]:53", 17, l4.HashSrcIP, 0x1cb632e6017fc947, 113},
	{"[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", "[::1]:53", 17, l4.HashSrcIPPort, 0x77a92493f85833a9, 471},
	{"[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", "[::1]:53", 17, l4.HashFiveTuple, 0xd46ae569be7bfb02, 837},
	{"0.0.0.0:0", "0.0.0.0:0", 6, l4.HashSrcIP, 0x35be97c8a307efd, 13},
	{"0.0.0.0:0", "0.0.0.0:0", 6, l4.HashSrcIPPort, 0x129038099001222, 4},
	{"0.0.0.0:0", "0.0.0.0:0", 6, l4.HashFiveTuple, 0x76fbc7347a52236d, 468},
}

// TestHashGoldenGo: Go's hash still gives the pinned values (no privileges
// needed).
func TestHashGoldenGo(t *testing.T) {
	for _, g := range goldenFlows {
		f := l4.Flow{Src: netip.MustParseAddrPort(g.src), Dst: netip.MustParseAddrPort(g.dst), Proto: g.proto}
		h := balance.FlowHash(&f, g.key)
		if h != g.hash || balance.Slot(h, agreeSize) != g.slot {
			t.Errorf("%v %v: hash %#x slot %d, want %#x %d", f, g.key, h, balance.Slot(h, agreeSize), g.hash, g.slot)
		}
	}
}

// TestHashGoldenProgram: the program picks the golden slots, and at table
// sizes whose slot shows more of the hash's high bits (at 262139
// slots the slot is about the hash's top 18 bits): a table empty but for the
// predicted slot forwards, any other slot would drop.
func TestHashGoldenProgram(t *testing.T) {
	lb, r := slotLB(t)
	for i, g := range goldenFlows {
		f := l4.Flow{Src: netip.MustParseAddrPort(g.src), Dst: netip.MustParseAddrPort(g.dst), Proto: g.proto}
		vip := l4.VIPKey{Addr: f.Dst, Proto: f.Proto}
		table := make([]uint32, agreeSize)
		for s := range table {
			table[s] = uint32(s + 1)
		}
		addVIP(t, lb, vip, uint32(i), l4.ForwardL2, g.key, table)
		purge(t, lb, vip) // UDP flows stay pinned from the previous key
		if got := slotOf(t, r, f); got != g.slot {
			t.Errorf("%v %v: program slot %d, want %d", f, g.key, got, g.slot)
		}
		for _, size := range []int{65537, 262139} {
			table := make([]uint32, size)
			table[balance.Slot(g.hash, size)] = 1
			must(t, lb.SetMaglev(uint32(i), table))
			purge(t, lb, vip)
			if got := slotOf(t, r, f); got != 0 {
				t.Errorf("%v %v size %d: went to backend %d", f, g.key, size, got+1)
			}
		}
	}
}

func purge(t *testing.T, lb *LB, vip l4.VIPKey) {
	t.Helper()
	if _, err := lb.PurgeVIP(vip); err != nil {
		t.Fatal(err)
	}
}

// carryFlow finds (deterministically) a flow whose slot at size n needs
// the carry out of the hash's low word: Slot differs from the product of
// the high word alone. Random flows hit one with probability n/2^32.
func carryFlow(n int) (l4.Flow, uint64) {
	rng := rand.New(rand.NewPCG(1, 2))
	for {
		f := l4.Flow{Src: netip.AddrPortFrom(randAddr(rng, false), randPort(rng)), Dst: vip4UDP.Addr, Proto: l4.UDP}
		h := balance.FlowHash(&f, l4.HashFiveTuple)
		if balance.Slot(h, n) != int((h>>32)*uint64(n)>>32) {
			return f, h
		}
	}
}

// TestHashCarry: the program adds the low word's carry as bits.Mul64 does.
func TestHashCarry(t *testing.T) {
	lb, r := slotLB(t)
	const size = 262139
	f, h := carryFlow(size)
	table := make([]uint32, size)
	table[balance.Slot(h, size)] = 1
	addVIP(t, lb, vip4UDP, 0, l4.ForwardL2, l4.HashFiveTuple, table)
	if got := slotOf(t, r, f); got != 0 {
		t.Fatalf("%v: went to backend %d, want the carried slot's backend 1", f, got+1)
	}
}
