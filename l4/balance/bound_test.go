// Bounded loads: a hot key range cannot push any backend past ceil(factor x mean), and keys stay home when they can.

package balance

import (
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// firstChoice returns the member a hashing picker's key maps to before any
// bound or retry.
func firstChoice(p Picker, f *l4.Flow) int {
	switch p := p.(type) {
	case *ring:
		return int(p.owner[p.lookup(flowHash(f, p.key))])
	case *maglev:
		return int(p.table[reduce(flowHash(f, p.key), len(p.table))])
	}
	panic("not a hashing picker")
}

func hashedOf(p Picker) *hashed {
	switch p := p.(type) {
	case *ring:
		return &p.hashed
	case *maglev:
		return &p.hashed
	}
	panic("not a hashing picker")
}

// skewedFlows returns n flows, every other one from one of 4 client
// addresses whose key maps to member 0 (the hot range: 50% of the flows on
// one backend of ten), the rest from spread clients.
func skewedFlows(p Picker, n int) []l4.Flow {
	var hot []netip.Addr
	for i := 0; len(hot) < 4; i++ {
		a := netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)})
		if firstChoice(p, &l4.Flow{Src: netip.AddrPortFrom(a, 1)}) == 0 {
			hot = append(hot, a)
		}
	}
	fs := flows(n, 77)
	for i := 0; i < n; i += 2 {
		fs[i].Src = netip.AddrPortFrom(hot[i/2%len(hot)], uint16(10000+i))
	}
	return fs
}

// With BalanceFactor 125, 10 equal backends and 2000 long-lived flows, half
// of them from a hot key range on one backend (without the bound it would
// hold over half the flows): after every pick the picked backend carries
// at most ceil(1.25 x total/10) flows, and a flow whose first choice was
// within the bound went there. (Spilled hot flows fill their next choices,
// which then spill some of their own keys: about half the flows end up
// home, the hot backend at its ceiling.)
func TestBoundedLoad(t *testing.T) {
	for _, alg := range []l4.Algorithm{l4.SourceHash, l4.Maglev} {
		t.Run(alg.String(), func(t *testing.T) {
			ms := makeMembers(equal(10, 100)...)
			p := mustNew(t, Options{Algorithm: alg, BalanceFactor: 125}, ms)
			h, idx := hashedOf(p), index(ms)
			fs := skewedFlows(p, 2000)
			home := 0
			for i := range fs {
				first := firstChoice(p, &fs[i])
				fits := h.admits(first, h.vipTotal())
				b := p.Pick(&fs[i], nil)
				if fits && idx[b] != first {
					t.Fatalf("flow %d: first choice %d was within the bound, went to %d", i, first, idx[b])
				}
				if fits {
					home++
				}
				total := ms[0].Backend.VIPFlows().Load()
				if ceil := (125*total + 999) / 1000; b.LiveFlows() > ceil {
					t.Fatalf("flow %d: backend %d has %d flows, above ceil(1.25 x %d/10) = %d", i, idx[b], b.LiveFlows(), total, ceil)
				}
			}
			t.Logf("%d of %d flows on their first choice; hot backend %d flows", home, len(fs), ms[0].Backend.LiveFlows())
			if got := ms[0].Backend.LiveFlows(); got != 250 {
				t.Errorf("hot backend holds %d flows, want its ceiling 250", got)
			}
		})
	}
}

// Weighted bound: each member's ceiling is its weight share, so a hot key
// on a light member spills while heavy members take more.
func TestBoundedLoadWeighted(t *testing.T) {
	ws := []uint32{100, 100, 200, 400}
	for _, alg := range []l4.Algorithm{l4.SourceHash, l4.Maglev} {
		t.Run(alg.String(), func(t *testing.T) {
			ms := makeMembers(ws...)
			p := mustNew(t, Options{Algorithm: alg, BalanceFactor: 150}, ms)
			fs := skewedFlows(p, 1600)
			for i := range fs {
				p.Pick(&fs[i], nil)
			}
			total := float64(ms[0].Backend.VIPFlows().Load())
			for i, share := range shares(ws) {
				if got, ceil := float64(ms[i].Backend.LiveFlows()), 1.5*total*share+1; got > ceil {
					t.Errorf("backend %d: %v flows, above 1.5 x its share %.0f", i, got, ceil)
				}
			}
		})
	}
}

// admits is exactly HAProxy's rule load+1 <= ceil(factor x (total+1) x w/W)
// on a grid of small values.
func TestAdmitsMatchesCeil(t *testing.T) {
	ms := makeMembers(1, 2, 3)
	h := newHashed(Options{BalanceFactor: 125}, ms)
	for load := int64(0); load < 40; load++ {
		for total := load; total < 80; total++ {
			for i, w := range []int64{1, 2, 3} {
				b := ms[i].Backend
				for b.LiveFlows() < load {
					b.Acquire()
				}
				num, den := 125*(total+1)*w, int64(100*6)
				want := load == 0 || load+1 <= (num+den-1)/den
				if got := h.admits(i, total); got != want {
					t.Fatalf("load %d total %d w %d: admits %v, want %v", load, total, w, got, want)
				}
			}
		}
	}
}
