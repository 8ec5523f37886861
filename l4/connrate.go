// A backend's max_conn_rate: new connections a second, as a GCRA (the
// token bucket's arithmetic in one atomic) on the backend's own monotonic
// clock.

package l4

import (
	"sync/atomic"
	"time"
)

// RateBurstDivisor sets a max_conn_rate's burst: a tenth of a second's
// worth of connections (at least one) may start at once after a quiet
// spell, so that in any second a backend sees at most rate + rate/10.
const RateBurstDivisor = 10

// connRate is a GCRA: a connection conforms while the theoretical arrival
// time (tat) is at most tol ahead of now; each one moves tat on by one
// interval. All of it is atomics: picks on every loop share it.
type connRate struct {
	epoch    time.Time    // zero of the clock (its monotonic reading is what counts)
	perSec   atomic.Int64 // max_conn_rate; 0 = none
	interval atomic.Int64 // ns between connections; 0 = no rate
	tol      atomic.Int64 // ns tat may run ahead of now: burst-1 intervals
	tat      atomic.Int64 // ns since epoch
}

// set changes the rate (0 = none); the bucket's state carries over.
func (r *connRate) set(perSec int64) {
	if perSec <= 0 {
		r.interval.Store(0)
		r.perSec.Store(0)
		return
	}
	iv := int64(time.Second) / perSec
	burst := max(1, perSec/RateBurstDivisor)
	r.tol.Store((burst - 1) * iv)
	r.interval.Store(iv)
	r.perSec.Store(perSec)
}

func (r *connRate) now() int64 { return int64(time.Since(r.epoch)) }

// over reports whether a connection now would exceed the rate.
func (r *connRate) over() bool {
	return r.interval.Load() != 0 && r.tat.Load()-r.now() > r.tol.Load()
}

// take counts a connection now if it conforms, and reports whether it did.
func (r *connRate) take() bool {
	iv := r.interval.Load()
	if iv == 0 {
		return true
	}
	now, tol := r.now(), r.tol.Load()
	for {
		tat := r.tat.Load()
		next := max(tat, now)
		if next-now > tol {
			return false
		}
		if r.tat.CompareAndSwap(tat, next+iv) {
			return true
		}
	}
}

// wait is how long until a connection conforms again (0: now, or no rate).
func (r *connRate) wait() time.Duration {
	if r.interval.Load() == 0 {
		return 0
	}
	return time.Duration(max(0, r.tat.Load()-r.now()-r.tol.Load()))
}
