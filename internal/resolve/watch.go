// Watcher: one name looked up again and again, on its TTL.

package resolve

import (
	"context"
	"sync"
	"time"
)

// maxRetry caps the back-off after failures, so that a resolver back
// from an outage is noticed within this much even with a long Max.
const maxRetry = 30 * time.Second

// Bounds clamp the interval between lookups of a name.
type Bounds struct {
	Min, Max time.Duration
}

// Next is how long a good answer with this TTL holds: the TTL clamped to
// [Min, Max].
func (b Bounds) Next(ttl time.Duration) time.Duration {
	return min(max(ttl, b.Min), b.Max)
}

// Retry is how long to wait after the n-th failure in a row (n >= 1):
// Min, doubling, at most min(Max, 30s), and never below Min.
func (b Bounds) Retry(n int) time.Duration {
	d := b.Min
	limit := min(b.Max, maxRetry)
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return max(min(d, limit), b.Min)
}

// Result is one lookup's outcome.
type Result struct {
	Query  Query
	Answer Answer // when Err is nil
	Err    error
	At     time.Time     // when the lookup ended
	Next   time.Duration // when the next one starts, from At
}

// Looker is what a Watcher asks; *Client is one.
type Looker interface {
	Lookup(ctx context.Context, q Query) (Answer, error)
}

// Watcher looks up one name now and then again on its TTL, until Stop.
type Watcher struct {
	q      Query
	c      Looker
	b      Bounds
	notify func(Result)
	cancel context.CancelFunc
	first  chan struct{} // closed after the first lookup (or Stop)
	done   chan struct{} // closed when the goroutine ends

}

// lookupBudget bounds one whole lookup (several queries and servers).
const lookupBudget = 10 * time.Second

// Watch starts watching q: the first lookup starts at once, and every
// result goes to notify, which runs on the watcher's goroutine (it must
// not wait for anything that waits for Stop).
func Watch(c Looker, q Query, b Bounds, notify func(Result)) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{q: q, c: c, b: b, notify: notify, cancel: cancel, first: make(chan struct{}), done: make(chan struct{})}
	go w.run(ctx)
	return w
}

// First is closed once the first lookup has reported (or the watcher stopped).
func (w *Watcher) First() <-chan struct{} { return w.first }

// Stop ends the watcher and waits for its goroutine; a lookup under way is
// abandoned.
func (w *Watcher) Stop() {
	w.cancel()
	<-w.done
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	var once sync.Once
	defer once.Do(func() { close(w.first) })
	failures := 0
	for {
		lctx, cancel := context.WithTimeout(ctx, lookupBudget)
		ans, err := w.c.Lookup(lctx, w.q)
		cancel()
		if ctx.Err() != nil {
			return
		}
		res := Result{Query: w.q, Answer: ans, Err: err, At: time.Now()}
		if err != nil {
			failures++
			res.Next = w.b.Retry(failures)
		} else {
			failures = 0
			res.Next = w.b.Next(ans.TTL)
		}
		w.notify(res)
		once.Do(func() { close(w.first) })
		t := time.NewTimer(res.Next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
