package l4

import (
	"math"
	"sync/atomic"
	"time"
)

// DefaultEWMAAlpha is the weight of a new sample in an EWMA.
const DefaultEWMAAlpha = 0.3

// ewmaOne is fixed-point 1.0 for alpha.
const ewmaOne = 1 << 16

// EWMA is an exponentially weighted moving average of durations kept in
// fixed point on atomics: readers never lock and writers never allocate.
// The zero value has no sample and alpha 0 (which SetAlpha must replace).
type EWMA struct {
	nanos atomic.Int64  // 0 = no sample yet
	alpha atomic.Uint32 // fixed point, ewmaOne = 1.0
}

// SetAlpha sets the weight of new samples, clamped to (0, 1].
func (e *EWMA) SetAlpha(alpha float64) {
	a := uint32(math.Round(alpha * ewmaOne))
	if a == 0 {
		a = 1
	}
	if a > ewmaOne {
		a = ewmaOne
	}
	e.alpha.Store(a)
}

// Observe folds in one sample. The first sample is taken as is.
func (e *EWMA) Observe(d time.Duration) {
	s := int64(d)
	if s <= 0 {
		s = 1 // a zero sample would read as "none"
	}
	a := int64(e.alpha.Load())
	for {
		old := e.nanos.Load()
		v := s
		if old != 0 {
			v = old + (s-old)*a/ewmaOne
			if v <= 0 {
				v = 1
			}
		}
		if e.nanos.CompareAndSwap(old, v) {
			return
		}
	}
}

// Value returns the average and whether any sample was observed.
func (e *EWMA) Value() (time.Duration, bool) {
	v := e.nanos.Load()
	return time.Duration(v), v != 0
}

// Reset forgets every sample (after a backend comes back, for example).
func (e *EWMA) Reset() { e.nanos.Store(0) }
