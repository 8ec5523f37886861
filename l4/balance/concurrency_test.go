// Pickers under concurrent picks, releases, rebuilds (snapshot swaps) and RTT samples; run with -race.

package balance

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

type pickerBox struct{ p Picker }

// 100 goroutines pick and release (sometimes retrying with a tried set)
// from whatever picker is current, while 4 goroutines keep building new
// pickers over random member subsets (including empty ones) and swapping
// them in, and 2 record RTT samples. Afterwards every count is back to
// zero with no underflow: picks and releases stayed paired across swaps.
func TestConcurrentPickAndSwap(t *testing.T) {
	ms := makeMembers(1, 5, 10, 100, 100, 200, 300, 1000)
	var cur atomic.Pointer[pickerBox]
	cur.Store(&pickerBox{mustNew(t, Options{}, ms)})
	stop := make(chan struct{})
	var bg sync.WaitGroup
	for g := range 4 {
		bg.Go(func() { swapLoop(t, &cur, ms, uint64(g), stop) })
	}
	for range 2 {
		bg.Go(func() { rttLoop(ms, stop) })
	}
	var wg sync.WaitGroup
	picks := 2000
	if testing.Short() {
		picks = 200
	}
	fs := flows(256, 3)
	for g := range 100 {
		wg.Go(func() {
			for i := range picks {
				pickRelease(t, cur.Load().p, &fs[(g+i)%len(fs)], i%7 == 0)
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	for _, m := range ms {
		if m.Backend.LiveFlows() != 0 || m.Backend.Underflows() != 0 {
			t.Errorf("%s: %d live flows, %d underflows", m.Backend.ID, m.Backend.LiveFlows(), m.Backend.Underflows())
		}
	}
	if n := ms[0].Backend.VIPFlows().Load(); n != 0 {
		t.Errorf("VIP flows %d after all releases", n)
	}
}

// pickRelease picks (and with retry, picks again skipping the first
// backend, as a failed connect would) and releases what it got.
func pickRelease(t *testing.T, p Picker, f *l4.Flow, retry bool) {
	var tried Tried
	b := p.Pick(f, &tried)
	if b == nil {
		return // an empty member set is current
	}
	if retry {
		tried.Add(b)
		if !b.Release() {
			t.Error("unmatched release")
		}
		if b = p.Pick(f, &tried); b == nil || tried.Has(b) {
			return
		}
	}
	if !b.Release() {
		t.Error("unmatched release")
	}
}

func swapLoop(t *testing.T, cur *atomic.Pointer[pickerBox], ms []Member, seed uint64, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		var sub []Member
		for _, m := range ms {
			if r.IntN(3) > 0 {
				sub = append(sub, m)
			}
		}
		opts := Options{
			Algorithm:     allAlgorithms[i%len(allAlgorithms)],
			HashKey:       l4.HashKey(i % 3),
			BalanceFactor: uint32(i%2) * 125,
			MaglevSize:    4093,
		}
		p, err := New(opts, sub)
		if err != nil {
			t.Error(err)
			return
		}
		cur.Store(&pickerBox{p})
	}
}

func rttLoop(ms []Member, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		b := ms[i%len(ms)].Backend
		b.ObserveRTT(time.Duration(1+rand.IntN(5000)) * time.Microsecond)
		if i%100 == 0 {
			b.RTT().Reset()
		}
	}
}
