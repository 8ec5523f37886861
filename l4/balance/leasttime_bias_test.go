package balance

import (
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// TestLeastTimeBias: with RTTs of 0.05, 5 and 20 ms (one fast local
// backend, two far ones) and 32 long-lived flows, the plain score starves
// the farthest backend; a 1 ms bias (the config default) gives every
// backend flows while the fastest still carries the most, and an idle VIP
// still sends each new flow to the fastest.
func TestLeastTimeBias(t *testing.T) {
	rtts := []time.Duration{50 * time.Microsecond, 5 * time.Millisecond, 20 * time.Millisecond}
	for _, tc := range []struct {
		bias        time.Duration
		farGetsSome bool
	}{{0, false}, {time.Millisecond, true}} {
		ms := makeMembers(1, 1, 1)
		for i, m := range ms {
			m.Backend.ObserveRTT(rtts[i])
		}
		p := mustNew(t, Options{Algorithm: l4.LeastTime, LeastTimeBias: tc.bias}, ms)
		if b := p.Pick(nil, nil); b != ms[0].Backend {
			t.Fatalf("bias %v: idle pick went to %s, want the fastest", tc.bias, b.ID)
		}
		b0 := ms[0].Backend
		b0.Release()
		for range 32 {
			p.Pick(nil, nil)
		}
		got := []int64{ms[0].Backend.LiveFlows(), ms[1].Backend.LiveFlows(), ms[2].Backend.LiveFlows()}
		if (got[2] > 0) != tc.farGetsSome || got[0] <= got[1] || got[1] < got[2] {
			t.Errorf("bias %v: flows %v", tc.bias, got)
		}
		releaseAll(ms)
	}
}
