// Bursts of concurrent picks with long-lived flows: least_conn spreads by weight, least_time by weight/RTT.

package balance

import (
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// burst runs n picks at once from n goroutines and keeps every flow.
func burst(t *testing.T, p Picker, n int) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			if p.Pick(nil, nil) == nil {
				t.Error("nil pick")
			}
		})
	}
	close(start)
	wg.Wait()
}

// checkLive compares live flows with want, within tol flows each.
func checkLive(t *testing.T, ms []Member, want []float64, tol float64) {
	t.Helper()
	for i, m := range ms {
		got := float64(m.Backend.LiveFlows())
		if got < want[i]-tol || got > want[i]+tol || got == 0 {
			t.Errorf("backend %d: %v live flows, want %.1f +- %.0f (and > 0)", i, got, want[i], tol)
		}
	}
}

// 1000 simultaneous picks of long-lived flows on weights 1:2:3:4 leave
// live flows by weight, within 20 flows (2% of the burst) each: the count
// is taken at pick time, so racing picks see each other.
func TestLeastConnBurst(t *testing.T) {
	ms := makeMembers(100, 200, 300, 400)
	burst(t, mustNew(t, Options{Algorithm: l4.LeastConn}, ms), 1000)
	checkLive(t, ms, []float64{100, 200, 300, 400}, 20)
}

// least_time's equilibrium has (live+1) x RTT / weight equal across
// backends; the tests below give the expected live flows of a burst of
// 1000 and allow 20 flows (2%) of slack for racing picks.
func TestLeastTimeBurst(t *testing.T) {
	tests := []struct {
		name string
		ms   []Member
		rtts []time.Duration // 0: no sample
		def  time.Duration
		want []float64
	}{
		// l+1 = c/rtt: c x (1 + 1/2 + 1/4) = 1003.
		{"rtt 1/2/4ms", makeMembers(1, 1, 1), []time.Duration{1e6, 2e6, 4e6}, 0, []float64{572.1, 285.6, 142.3}},
		// The unsampled backend counts as the 2ms default.
		{"no sample = default", makeMembers(1, 1, 1), []time.Duration{1e6, 0, 4e6}, 2e6, []float64{572.1, 285.6, 142.3}},
		// Equal RTTs: l+1 by weight, c x 10 = 1004.
		{"weights 1:2:3:4", makeMembers(1, 2, 3, 4), []time.Duration{3e6, 3e6, 3e6, 3e6}, 0, []float64{99.4, 199.8, 300.2, 400.6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, d := range tt.rtts {
				if d > 0 {
					tt.ms[i].Backend.ObserveRTT(d)
				}
			}
			burst(t, mustNew(t, Options{Algorithm: l4.LeastTime, LeastTimeDefault: tt.def}, tt.ms), 1000)
			checkLive(t, tt.ms, tt.want, 20)
		})
	}
}

// At equal load the lowest RTT wins; a slow but idle backend beats a fast
// one with enough flows.
func TestLeastTimePrefersFast(t *testing.T) {
	ms := makeMembers(1, 1, 1)
	for i, d := range []time.Duration{4e6, 1e6, 2e6} {
		ms[i].Backend.ObserveRTT(d)
	}
	p := mustNew(t, Options{Algorithm: l4.LeastTime}, ms)
	for range 20 {
		if b := p.Pick(nil, nil); b != ms[1].Backend {
			t.Fatalf("idle pick went to %s, want the 1ms %s", b.ID, ms[1].Backend.ID)
		}
		ms[1].Backend.Release()
	}
	for range 4 { // 1ms x (4+1) = 5ms > 2ms x 1 and 4ms x 1
		ms[1].Backend.Acquire()
	}
	if b := p.Pick(nil, nil); b != ms[2].Backend {
		t.Fatalf("pick went to %s, want the idle 2ms %s", b.ID, ms[2].Backend.ID)
	}
}
