// slowstart.go: the weight ramp of a backend that just came up.

package health

import "time"

// slowStartFloor is the share of the weight a backend gets the moment it
// comes up, in percent: enough to warm caches and pools, too little to
// flood a backend that is still cold.
const slowStartFloor = 10

// weightFloor is the least weight a backend with weight gets from slow
// start or lag_weight: slowStartFloor percent, at least 1.
func weightFloor(weight uint32) uint64 {
	return max(uint64(weight)*slowStartFloor/100, 1)
}

// SlowStartWeight returns the weight a backend that has been up since
// upSince should have at now: a linear ramp from 10% of weight (at least
// 1) to the full weight over window. A zero window, a zero upSince, a
// backend up for longer than window or a zero weight (drain) gives weight
// unchanged; a time before upSince (clock step) gives the floor. Pure: the
// runtime calls it on its own refresh tick.
func SlowStartWeight(weight uint32, upSince, now time.Time, window time.Duration) uint32 {
	if weight == 0 || window <= 0 || upSince.IsZero() {
		return weight
	}
	elapsed := now.Sub(upSince)
	if elapsed >= window {
		return weight
	}
	floor := weightFloor(weight)
	if elapsed <= 0 {
		return uint32(floor)
	}
	frac := float64(elapsed) / float64(window) // in (0, 1)
	w := floor + uint64(float64(uint64(weight)-floor)*frac)
	return uint32(min(w, uint64(weight)))
}
