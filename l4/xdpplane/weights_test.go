package xdpplane

import (
	"math"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

func TestNextScales(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		alg  l4.Algorithm
		in   []WeightInput
		want []float64
	}{
		{"equal loads stay", l4.LeastConn, []WeightInput{{Weight: 100, Live: 10, Scale: 1}, {Weight: 100, Live: 10, Scale: 1}}, []float64{1, 1}},
		{"loads per weight equal stay", l4.LeastConn, []WeightInput{{Weight: 200, Live: 21, Scale: 1}, {Weight: 100, Live: 10, Scale: 1}}, []float64{1, 1}},
		{"a loaded backend loses one bounded step", l4.LeastConn, []WeightInput{{Weight: 100, Live: 90, Scale: 1}, {Weight: 100, Live: 10, Scale: 1}}, []float64{1 / ScaleStep, ScaleStep}},
		{"toward the target from below, one step", l4.LeastConn, []WeightInput{{Weight: 100, Live: 900, Scale: 0.1}, {Weight: 100, Scale: 1}}, []float64{0.1 * ScaleStep, ScaleStep}},
		{"never below the floor", l4.LeastConn, []WeightInput{{Weight: 100, Live: 1e6, Scale: scaleMin}, {Weight: 100}, {Weight: 100}, {Weight: 100}, {Weight: 100},
			{Weight: 100}, {Weight: 100}, {Weight: 100}, {Weight: 100}, {Weight: 100}, {Weight: 100}, {Weight: 100}, {Weight: 100}, {Weight: 100}},
			[]float64{scaleMin, ScaleStep, ScaleStep, ScaleStep, ScaleStep, ScaleStep, ScaleStep, ScaleStep, ScaleStep, ScaleStep, ScaleStep, ScaleStep, ScaleStep, ScaleStep}},
		{"back toward 1 when loads even out", l4.LeastConn, []WeightInput{{Weight: 100, Live: 10, Scale: 0.5}, {Weight: 100, Live: 10, Scale: 2}}, []float64{0.5 * ScaleStep, 2 / ScaleStep}},
		{"least_time favours the near backend", l4.LeastTime, []WeightInput{{Weight: 100, RTT: ms, Scale: 1}, {Weight: 100, RTT: 20 * ms, Scale: 1}}, []float64{ScaleStep, 1 / ScaleStep}},
		{"least_time counts flows too", l4.LeastTime, []WeightInput{{Weight: 100, RTT: ms, Live: 39, Scale: 1}, {Weight: 100, RTT: ms, Live: 1, Scale: 1}}, []float64{1 / ScaleStep, ScaleStep}},
		{"no sample: the default RTT", l4.LeastTime, []WeightInput{{Weight: 100, Scale: 1}, {Weight: 100, RTT: ms, Scale: 1}}, []float64{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NextScales(tc.alg, tc.in, ms, ms)
			for i := range got {
				if math.Abs(got[i]-tc.want[i]) > 1e-9 {
					t.Fatalf("scales %v, want %v", got, tc.want)
				}
			}
		})
	}
}
