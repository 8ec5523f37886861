// Rebalancing: after a backend joins or comes back, long-lived connections
// stay where they were. A rebalance closes connections on the backends
// above their share, at a bounded rate, until every backend is within a
// tolerance of its share, so clients reconnect to the others gradually.

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/proxy"
)

// RebalanceTolerance is how far a backend's live flows may be from its
// target for the backend to count as balanced: 10% of the target, or one
// flow when that is more.
const RebalanceTolerance = 0.10

// MaxRebalanceRate bounds a rebalance's rate (connections per second): the
// config's bound of rebalance_rate.
const MaxRebalanceRate = config.MaxRebalanceRate

// CheckRebalanceRate refuses a rate a rebalance may not run at (0: the
// VIP's rebalance_rate), saying what is allowed and why.
func CheckRebalanceRate(rate int) error {
	if rate >= 0 && rate <= MaxRebalanceRate {
		return nil
	}
	return fmt.Errorf("rate %d is out of range: a rebalance closes 1 to %d connections a second, the bound of rebalance_rate "+
		"(0: the VIP's rebalance_rate), so that the clients it moves reconnect gradually, not all at once", rate, MaxRebalanceRate)
}

// A rebalance stops for want of progress when this many of its closes, and
// at least rebalanceStallTime, went by without a closed client landing on
// a backend below its share: the clients come back where they were (a
// hashing algorithm), or do not come back at all. Past rebalanceStallCloses
// it closes nothing more until they land.
const (
	rebalanceStallCloses = 20
	rebalanceStallTime   = 5 * time.Second
)

var (
	// ErrRebalanceRunning: one runs already (409).
	ErrRebalanceRunning = errors.New("a rebalance of this VIP is already running")
)

// RebalanceOptions are a rebalance's settings.
type RebalanceOptions struct {
	Rate  int    // connections closed per second; 0 = the VIP's rebalance_rate
	Reset bool   // end connections with an RST to both sides instead of a FIN
	By    string // who asked, for status and the log
}

// Rebalance starts a rebalance of the VIP named vipName and returns its
// plan at once; it runs in the background until done or stopped.
func (r *Runtime) Rebalance(vipName string, o RebalanceOptions) (plane.RebalanceStatus, error) {
	v := r.vipNamed(vipName)
	if v == nil {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	return v.startRebalance(o)
}

// RebalanceStatus reports the VIP's running or last rebalance; with none,
// what one would close now.
func (r *Runtime) RebalanceStatus(vipName string) (plane.RebalanceStatus, error) {
	v := r.vipNamed(vipName)
	if v == nil {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	return v.rebalanceStatus(), nil
}

// StopRebalance stops the VIP's running rebalance, if any, and returns its
// status.
func (r *Runtime) StopRebalance(vipName, by string) (plane.RebalanceStatus, error) {
	v := r.vipNamed(vipName)
	if v == nil {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	v.stopRebalance("stopped by " + by)
	return v.rebalanceStatus(), nil
}

// rebalance is one run of the closer for one VIP.
type rebalance struct {
	v      *vip
	rate   int
	how    proxy.CloseHow
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when run returns

	// round is the plan being closed or waited on; only run touches it
	// once started.
	round *round

	mu     sync.Mutex
	st     plane.RebalanceStatus // Backends unused: computed when asked
	closed map[l4.BackendID]int  // per backend
	left   map[l4.BackendID]int  // the round's closes still to make, per backend
}

// startRebalance plans and starts a rebalance, unless one runs or the VIP
// cannot be rebalanced.
func (v *vip) startRebalance(o RebalanceOptions) (plane.RebalanceStatus, error) {
	vc := v.cfg()
	rate := o.Rate
	if rate == 0 {
		rate = vc.RebalanceRate
	}
	if _, err := v.dp.CloseSome(nil, 0, false); err != nil {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w", vc.Name, err)
	}
	if vc.RebalanceRate == 0 {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w: its rebalance_rate is 0", vc.Name, plane.ErrCannotRebalance)
	}
	if err := CheckRebalanceRate(rate); err != nil {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w", vc.Name, err)
	}
	how := proxy.CloseFIN
	if o.Reset {
		how = proxy.CloseReset
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.rebal != nil && v.rebal.running() {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w (%s); stop it first", vc.Name, ErrRebalanceRunning, v.rebal.progress())
	}
	rows := v.balanceRowsLocked()
	ctx, cancel := context.WithCancelCause(context.Background())
	rb := &rebalance{v: v, rate: rate, how: how, cancel: cancel, done: make(chan struct{}), closed: map[l4.BackendID]int{}}
	rb.st = plane.RebalanceStatus{VIP: vc.Name, State: plane.RebalanceRunning, Rate: rate, Close: how.String(), Tolerance: RebalanceTolerance,
		By: o.By, Started: time.Now()}
	rb.newRoundLocked(rows)
	v.rebal = rb
	if balanced(rows) {
		rb.endLocked(plane.RebalanceDone, nothingToDo(rows))
		close(rb.done)
		cancel(nil)
		v.log.Info("rebalance: nothing to do", zap.String("by", o.By), zap.String("reason", rb.st.Reason))
	} else {
		go rb.run(ctx)
		v.log.Info("rebalance started", zap.String("by", o.By), zap.Int("rate", rate), zap.Stringer("close", how), zap.Int("planned", rb.st.Planned))
	}
	return rb.statusWith(rows), nil
}

// nothingToDo says why a rebalance has nothing to close.
func nothingToDo(rows []balanceRow) string {
	eligible := 0
	for _, r := range rows {
		if r.weight > 0 {
			eligible++
		}
	}
	if eligible < 2 {
		return fmt.Sprintf("nothing to do: %d backend takes new flows", eligible)
	}
	return fmt.Sprintf("nothing to do: every backend is within %.0f%% of its share", 100*RebalanceTolerance)
}

// stopRebalance stops a running rebalance with reason and waits for it.
func (v *vip) stopRebalance(reason string) {
	v.mu.Lock()
	rb := v.rebal
	v.mu.Unlock()
	if rb == nil {
		return
	}
	rb.cancel(errors.New(reason))
	<-rb.done
}

// rebalanceStatus is the running or last rebalance with the backends as
// they are now; with none, what one would close now.
func (v *vip) rebalanceStatus() plane.RebalanceStatus {
	v.mu.Lock()
	rows := v.balanceRowsLocked()
	rb := v.rebal
	v.mu.Unlock()
	if rb == nil {
		vc := v.cfg()
		st := plane.RebalanceStatus{VIP: vc.Name, State: plane.RebalanceNone, Tolerance: RebalanceTolerance, Rate: vc.RebalanceRate}
		if _, err := v.dp.CloseSome(nil, 0, false); err != nil {
			st.Reason = err.Error()
		} else if vc.RebalanceRate == 0 {
			st.Reason = "refused: its rebalance_rate is 0"
		}
		return withRows(st, rows, nil)
	}
	return rb.statusWith(rows)
}

// statusWith is the rebalance's status over rows: while it runs, what
// its round has left to close; once ended, what a new one would plan.
func (rb *rebalance) statusWith(rows []balanceRow) plane.RebalanceStatus {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.st.State != plane.RebalanceRunning {
		return withRows(rb.st, rows, rb.closed)
	}
	st := withRows(rb.st, rows, rb.closed)
	st.ToClose = 0
	for i := range st.Backends {
		st.Backends[i].ToClose = rb.left[l4.BackendID(st.Backends[i].ID)]
		st.ToClose += st.Backends[i].ToClose
	}
	return st
}

// withRows fills st's backends from rows, with what a rebalance would
// plan now.
func withRows(st plane.RebalanceStatus, rows []balanceRow, closed map[l4.BackendID]int) plane.RebalanceStatus {
	st.ToClose = closesNeeded(rows)
	plan := allocate(rows, st.ToClose)
	st.Backends = make([]plane.RebalanceBackend, len(rows))
	for i, r := range rows {
		st.Backends[i] = plane.RebalanceBackend{ID: string(r.b.ID), Eligible: r.weight > 0, Weight: r.weight, Live: r.live,
			Target: math.Round(r.target*10) / 10, ToClose: plan[i], Closed: closed[r.b.ID]}
	}
	return st
}

func (rb *rebalance) running() bool {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return rb.st.State == plane.RebalanceRunning
}

// progress is "N of M closed", for messages.
func (rb *rebalance) progress() string {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return fmt.Sprintf("%d of %d planned closed, at %d/s", rb.st.Closed, rb.st.Planned, rb.rate)
}

// endLocked records the end (rb.mu held, or rb not yet shared).
func (rb *rebalance) endLocked(state, reason string) {
	rb.st.State, rb.st.Reason, rb.st.Ended = state, reason, time.Now()
}

// end records the end and logs it.
func (rb *rebalance) end(state, reason string) {
	rb.mu.Lock()
	rb.endLocked(state, reason)
	st := rb.st
	rb.mu.Unlock()
	rb.v.log.Info("rebalance "+state, zap.String("reason", reason), zap.Int("closed", st.Closed),
		zap.Int("planned", st.Planned), zap.Duration("took", st.Ended.Sub(st.Started)))
}

// rebalanceTick is how often a rebalance closes: every 100ms, or less
// often at rates below 10/s, so that each tick closes at least one.
func rebalanceTick(rate int) time.Duration {
	return max(100*time.Millisecond, time.Second/time.Duration(rate))
}

// run closes connections tick by tick until the backends are balanced,
// progress stops, or it is stopped.
func (rb *rebalance) run(ctx context.Context) {
	defer close(rb.done)
	tick := rebalanceTick(rb.rate)
	t := time.NewTicker(tick)
	defer t.Stop()
	p := pacer{rate: float64(rb.rate), burst: math.Max(1, float64(rb.rate)*tick.Seconds()), last: time.Now()}
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			rb.end(plane.RebalanceStopped, context.Cause(ctx).Error())
			return
		case now = <-t.C:
		}
		if state, reason := rb.step(&p, now); state != "" {
			rb.end(state, reason)
			return
		}
	}
}

// pacer is the rate limit and the progress watch of a running rebalance.
type pacer struct {
	rate, burst float64
	tokens      float64
	last        time.Time
	// best is the most flows ever counted toward their backends' targets
	// (see placed); sinceBest counts the closes since, bestAt when it was.
	best      float64
	sinceBest int
	bestAt    time.Time
	started   bool
}

// step is one tick: it returns a state when the rebalance ends. A round
// closes its plan at the rate, then waits for the closed clients to land
// (the live flows back to what they were, or rebalanceStallTime); only
// then is the balance judged: done, stopped for want of progress, or a
// next round. Judged earlier, the live counts would be short of the
// clients still reconnecting, the targets with them, and a rebalance
// would close more than it planned and call the backends balanced with
// the new one empty.
func (rb *rebalance) step(p *pacer, now time.Time) (state, reason string) {
	v := rb.v
	if v.stopped.Load() {
		return plane.RebalanceStopped, "the VIP stopped"
	}
	if v.cfg().RebalanceRate == 0 {
		return plane.RebalanceStopped, "a reload set rebalance_rate to 0"
	}
	v.mu.Lock()
	rows := v.balanceRowsLocked()
	v.mu.Unlock()
	p.tokens = math.Min(p.burst, p.tokens+p.rate*now.Sub(p.last).Seconds())
	p.last = now
	r := rb.round
	if r.closing() {
		if u := placed(rows); !p.started || u > p.best+0.5 {
			p.best, p.sinceBest, p.bestAt, p.started = u, 0, now, true
		} else if p.sinceBest >= rebalanceStallCloses && now.Sub(p.bestAt) >= rebalanceStallTime {
			return plane.RebalanceStopped, rb.stallReason(p.sinceBest)
		}
		if p.sinceBest < rebalanceStallCloses { // else wait for the clients closed so far to land somewhere
			rb.closeTick(p, rows, now)
		}
		return "", ""
	}
	landed, back := r.landed(rows, now)
	if !landed {
		return "", ""
	}
	u := placed(rows)
	if u > p.best+0.5 {
		p.best, p.sinceBest, p.bestAt = u, 0, now
	}
	switch {
	case balanced(rows):
		return plane.RebalanceDone, fmt.Sprintf("every backend is within %.0f%% of its share (or one flow)", 100*RebalanceTolerance)
	case !back && u <= r.placed+0.5:
		return plane.RebalanceStopped, fmt.Sprintf("no progress: of the %d connections the last round closed, some clients did not reconnect within %v and none landed on a backend below its share; closing more would only lose clients",
			r.closed, rebalanceStallTime)
	case p.sinceBest >= rebalanceStallCloses && now.Sub(p.bestAt) >= rebalanceStallTime:
		return plane.RebalanceStopped, rb.stallReason(p.sinceBest)
	}
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.newRoundLocked(rows) == 0 {
		return plane.RebalanceStopped, "nothing left to close: no backend above its share has a connection to give"
	}
	return "", ""
}

// closeTick closes this tick's share of the round's plan.
func (rb *rebalance) closeTick(p *pacer, rows []balanceRow, now time.Time) {
	r := rb.round
	for i, n := range r.allocate(rows, int(p.tokens)) {
		if n == 0 {
			continue
		}
		b := rows[i].b
		got, _ := rb.v.dp.CloseSome(b, n, rb.how == proxy.CloseReset)
		p.tokens -= float64(got)
		p.sinceBest += got
		r.left[b] -= n // fewer closed: the backend has no more to give
		r.closed += got
		rb.noteClosed(b.ID, got)
	}
	if !r.closing() {
		r.closedAt = now
	}
	rb.mu.Lock()
	defer rb.mu.Unlock()
	for b, n := range r.left {
		rb.left[b.ID] = max(n, 0)
	}
}

func (rb *rebalance) noteClosed(id l4.BackendID, n int) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	rb.st.Closed += n
	rb.closed[id] += n
}

// stallReason says why closing stopped helping, with what the algorithm
// suggests.
func (rb *rebalance) stallReason(closes int) string {
	vc := rb.v.cfg()
	why := "the clients did not reconnect, or not to the backends below their share"
	if vc.Algorithm.Hashing() {
		why = fmt.Sprintf("with algorithm %s a client reconnects to the backend its address hashes to, so only clients whose hash moved can move", vc.Algorithm)
	}
	return fmt.Sprintf("no progress: the last %d connections closed did not land on a backend below its share within %v; %s",
		closes, rebalanceStallTime, why)
}

// balanceRow is one backend as a rebalance sees it.
type balanceRow struct {
	b      *l4.Backend
	weight uint32 // effective weight for new flows; 0 = not eligible
	live   int64
	target float64
}

// balanceRowsLocked lists the VIP's backends by identity with their
// targets: the live flows of the eligible backends, shared by the weights
// new flows see (v.mu held).
func (v *vip) balanceRowsLocked() []balanceRow {
	weights := map[*l4.Backend]uint32{}
	if snap := v.store.Load(); snap != nil {
		for _, m := range snap.Members {
			weights[m.Backend] = m.Weight
		}
	}
	rows := make([]balanceRow, 0, len(v.backends))
	for _, b := range v.backends {
		rows = append(rows, balanceRow{b: b.b, weight: weights[b.b], live: b.b.LiveFlows()})
	}
	slices.SortFunc(rows, func(a, b balanceRow) int { return strings.Compare(string(a.b.ID), string(b.b.ID)) })
	setTargets(rows)
	return rows
}

// setTargets shares the eligible rows' live flows by their weights.
func setTargets(rows []balanceRow) {
	var n int64
	var w uint64
	for _, r := range rows {
		if r.weight > 0 {
			n += r.live
			w += uint64(r.weight)
		}
	}
	for i := range rows {
		if rows[i].weight > 0 {
			rows[i].target = float64(n) * float64(rows[i].weight) / float64(w)
		}
	}
}

// slack is how far from target a backend may be and count as balanced.
func slack(target float64) float64 { return math.Max(RebalanceTolerance*target, 1) }

// balanced reports whether every eligible row is within its slack.
func balanced(rows []balanceRow) bool { return closesNeeded(rows) == 0 }

// closesNeeded is how many closes bring every eligible row within its
// slack, if each closed client lands below its target: what the rows
// above their slack must give up, or what those below must receive,
// whichever is more.
func closesNeeded(rows []balanceRow) int {
	var over, under int
	for _, r := range rows {
		if r.weight == 0 {
			continue
		}
		d := float64(r.live) - r.target
		if x := d - slack(r.target); x > 1e-9 {
			over += int(math.Ceil(x - 1e-9))
		}
		if x := -d - slack(r.target); x > 1e-9 {
			under += int(math.Ceil(x - 1e-9))
		}
	}
	return max(over, under)
}

// allocate spreads k closes over the eligible rows above their targets,
// one at a time to the row furthest above its target (relative to it).
func allocate(rows []balanceRow, k int) []int {
	out := make([]int, len(rows))
	for range k {
		best, bestExcess := -1, 0.0
		for i, r := range rows {
			if r.weight == 0 || r.target <= 0 {
				continue
			}
			if e := (float64(r.live-int64(out[i])) - r.target) / r.target; e > bestExcess {
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

// placed counts the flows up to each eligible row's target: a close whose
// client lands on a backend below its share raises it by one; one whose
// client comes back where it was leaves it; one whose client goes away
// lowers it.
func placed(rows []balanceRow) float64 {
	var u float64
	for _, r := range rows {
		if r.weight > 0 {
			u += math.Min(float64(r.live), r.target)
		}
	}
	return u
}
