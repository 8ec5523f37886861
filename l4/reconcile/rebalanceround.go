// Rebalance rounds: a plan of closes per backend made against the targets
// of one moment, closed at the rate, then waited on until the closed
// clients have landed somewhere.

package reconcile

import (
	"time"

	"github.com/l4lb/l4lb/l4"
)

// round is one plan of a running rebalance; only the rebalance's
// goroutine touches it once the rebalance runs.
type round struct {
	left     map[*l4.Backend]int     // closes still to make
	target   map[*l4.Backend]float64 // each backend's target when planned
	live     int64                   // the eligible backends' live flows when planned
	placed   float64                 // placed(rows) when planned: did the round help?
	closed   int                     // connections it closed
	closedAt time.Time               // when its closes ended (zero while it closes)
}

// newRound plans a round over rows and returns it with its closes.
func newRound(rows []balanceRow) (*round, int) {
	r := &round{left: map[*l4.Backend]int{}, target: map[*l4.Backend]float64{}, placed: placed(rows)}
	total := 0
	for i, n := range allocate(rows, closesNeeded(rows)) {
		row := rows[i]
		if row.weight > 0 {
			r.live += row.live
		}
		r.target[row.b] = row.target
		if n > 0 {
			r.left[row.b] = n
			total += n
		}
	}
	return r, total
}

// newRoundLocked makes the next round (rb.mu held, or rb not yet shared)
// and returns its closes.
func (rb *rebalance) newRoundLocked(rows []balanceRow) int {
	r, n := newRound(rows)
	rb.round = r
	rb.st.Planned += n
	rb.st.Rounds++
	rb.left = map[l4.BackendID]int{}
	for b, k := range r.left {
		rb.left[b.ID] = k
	}
	return n
}

// closing reports whether the round has closes left to make.
func (r *round) closing() bool {
	for _, n := range r.left {
		if n > 0 {
			return true
		}
	}
	return false
}

// landed reports whether the round's closed clients have landed: back,
// the eligible backends hold as many flows as when it was planned; or
// rebalanceStallTime has passed since its last close (a client not back
// by then is not waited for).
func (r *round) landed(rows []balanceRow, now time.Time) (landed, back bool) {
	var live int64
	for _, row := range rows {
		if row.weight > 0 {
			live += row.live
		}
	}
	back = live >= r.live
	return back || now.Sub(r.closedAt) >= rebalanceStallTime, back
}

// allocate spreads up to k of the round's closes over rows, one at a time
// to the backend furthest above its planned target, within each one's
// plan, and only from a backend still above that target: one whose
// clients left meanwhile gives no more (its plan is dropped).
func (r *round) allocate(rows []balanceRow, k int) []int {
	out := make([]int, len(rows))
	for _, row := range rows {
		if t := r.target[row.b]; r.left[row.b] > 0 && float64(row.live) <= t {
			r.left[row.b] = 0
		}
	}
	for range k {
		best, bestExcess := -1, 0.0
		for i, row := range rows {
			t := r.target[row.b]
			if r.left[row.b] <= out[i] || t <= 0 {
				continue
			}
			if e := (float64(row.live-int64(out[i])) - t) / t; e > 0 && (best < 0 || e > bestExcess) {
				best, bestExcess = i, e
			}
		}
		if best < 0 {
			break
		}
		out[best]++
	}
	return out
}
