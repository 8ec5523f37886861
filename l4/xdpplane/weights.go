// least_conn and least_time in xdp mode: live flows and handshake RTTs
// turned into Maglev weights, a bounded step at a time.

package xdpplane

import (
	"math"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// The XDP program picks a new flow's backend from a Maglev table, so it
// cannot compare live flows or RTTs per packet as the proxy's pickers do.
// Instead, every weight_refresh, each backend's share of the table is
// scaled toward what the algorithm would give it: least_conn shifts new
// flows toward backends with fewer live flows per weight, least_time
// toward backends with a lower (live flows + 1) x (RTT + bias) per weight.
// Established flows stay on their backends (the conntrack pins them), so
// only new flows shift.
const (
	ScaleStep = 1.25 // a scale moves by at most this factor per refresh
	scaleMin  = 0.1  // and stays within [scaleMin, scaleMax] of the weight
	scaleMax  = 10.0
)

// WeightInput is what the scale of one backend depends on.
type WeightInput struct {
	Weight uint32        // configured (and slow-start) weight
	Live   uint64        // live flows in the conntrack
	RTT    time.Duration // handshake RTT estimate (least_time)
	Scale  float64       // the scale in force
}

// NextScales returns each backend's next scale. The target gives backend
// i a share proportional to weight_i / cost_i, where cost is what the
// algorithm minimises per new flow; each scale then moves toward its
// target by at most ScaleStep, so a burst of flows or one noisy RTT sample
// cannot swing the table.
func NextScales(alg l4.Algorithm, in []WeightInput, bias, defaultRTT time.Duration) []float64 {
	out := make([]float64, len(in))
	costs := make([]float64, len(in))
	mean := 0.0
	for i, b := range in {
		costs[i] = cost(alg, b, bias, defaultRTT)
		mean += costs[i]
	}
	mean /= float64(max(len(in), 1))
	for i, b := range in {
		target := 1.0
		if costs[i] > 0 && mean > 0 {
			target = mean / costs[i]
		}
		cur := b.Scale
		if cur <= 0 {
			cur = 1
		}
		next := math.Min(math.Max(target, cur/ScaleStep), cur*ScaleStep)
		out[i] = math.Min(math.Max(next, scaleMin), scaleMax)
	}
	return out
}

// cost is what one more flow costs on b, per unit of weight.
func cost(alg l4.Algorithm, b WeightInput, bias, defaultRTT time.Duration) float64 {
	w := float64(max(b.Weight, 1))
	flows := float64(b.Live) + 1
	if alg != l4.LeastTime {
		return flows / w
	}
	rtt := b.RTT
	if rtt <= 0 {
		rtt = defaultRTT
	}
	return flows * float64(rtt+bias) / w
}

// Scaled applies a scale to a weight, never below 1.
func Scaled(w uint32, scale float64) uint32 {
	if scale <= 0 || scale == 1 {
		return w
	}
	return uint32(max(1, math.Round(float64(w)*scale)))
}
