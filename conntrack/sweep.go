// Sweeper: the coarse clock, bounded idle expiry, and the table's lifecycle.

package conntrack

import (
	"context"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// lockSpan is the most slots scanned under one hold of a shard's lock, so a
// sweep delays that shard's lookups by a microsecond or two at most.
const lockSpan = 256

// Start runs the sweeper: every Tick it advances the clock and sweeps, until
// ctx is done or the table is closed. Cancelling ctx stops only the sweeper;
// Close ends the entries.
func (t *Table) Start(ctx context.Context) error {
	t.life.Lock()
	defer t.life.Unlock()
	switch {
	case t.closed:
		return ErrClosed
	case t.started:
		return ErrStarted
	}
	t.started = true
	t.done = make(chan struct{})
	go t.run(ctx)
	return nil
}

// run is the sweeper goroutine.
func (t *Table) run(ctx context.Context) {
	defer close(t.done)
	tk := time.NewTicker(t.tick)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.stop:
			return
		case <-tk.C:
			t.Sweep()
		}
	}
}

// Close stops the sweeper, waits for it, and ends every entry
// (ReasonClosed), releasing their counts. Later inserts release their count
// and fail with ErrClosed. Close is idempotent and always returns nil.
func (t *Table) Close() error {
	t.life.Lock()
	if t.closed {
		t.life.Unlock()
		return nil
	}
	t.closed = true
	close(t.stop)
	done := t.done
	t.life.Unlock()
	if done != nil {
		<-done
	}
	var buf []ended
	for i := range t.shards {
		buf = t.closeShard(&t.shards[i], buf[:0])
	}
	return nil
}

// closeShard ends every entry of s and marks it closed.
func (t *Table) closeShard(s *shard, buf []ended) []ended {
	s.mu.Lock()
	s.closed = true
	for slot := uint32(0); slot < s.used; slot++ {
		if s.at(slot).live {
			buf = t.take(s, slot, ReasonClosed, buf)
		}
	}
	s.reset()
	s.mu.Unlock()
	t.finish(buf, ReasonClosed)
	return buf
}

// Sweep advances the clock from Options.Now and expires idle entries,
// scanning at most SweepBatch slab slots per shard from where the last
// sweep stopped. It returns the slots scanned and the entries expired. The
// sweeper calls it every Tick; tests call it after moving a fake clock.
func (t *Table) Sweep() (scanned, expired int) {
	t.sweepMu.Lock()
	defer t.sweepMu.Unlock()
	now := t.advance()
	for i := range t.shards {
		sc, ex := t.sweepShard(&t.shards[i], now)
		scanned += sc
		expired += ex
	}
	return scanned, expired
}

// advance moves the coarse clock to Now (caller holds sweepMu). It never
// moves it back, so a stepped wall clock cannot make every flow look idle
// or young. The clock wraps at 2^32 ticks; ages are differences, which
// stay right across the wrap because check keeps timeouts under 2^31 ticks.
func (t *Table) advance() uint32 {
	if d := t.now().Sub(t.epoch); d > 0 && uint64(d/t.tick) > t.ticks {
		t.ticks = uint64(d / t.tick)
		t.clock.Store(uint32(t.ticks))
	}
	return t.clock.Load()
}

// sweepShard scans up to batch slots of s (never the same slot twice in one
// sweep), in spans of lockSpan, finishing expired entries between spans.
func (t *Table) sweepShard(s *shard, now uint32) (scanned, expired int) {
	s.mu.RLock()
	limit := min(t.batch, int(s.used))
	s.mu.RUnlock()
	for scanned < limit {
		n := min(limit-scanned, lockSpan)
		s.mu.Lock()
		t.sweepBuf = t.scan(s, n, now, t.sweepBuf[:0])
		s.mu.Unlock()
		scanned += n
		expired += len(t.sweepBuf)
		t.finish(t.sweepBuf, ReasonExpired)
	}
	return scanned, expired
}

// scan looks at n slots of s from its cursor (caller holds s.mu) and takes
// the idle ones into buf.
func (t *Table) scan(s *shard, n int, now uint32, buf []ended) []ended {
	for ; n > 0 && s.used > 0; n-- {
		if s.cursor >= s.used {
			s.cursor = 0
		}
		slot := s.cursor
		s.cursor++
		if e := s.at(slot); e.live && now-e.last.Load() >= t.idle(e.key.proto) {
			buf = t.take(s, slot, ReasonExpired, buf)
		}
	}
	return buf
}

// idle returns protocol p's idle timeout in ticks.
func (t *Table) idle(p l4.Protocol) uint32 {
	if p == l4.TCP {
		return t.tcpIdle.Load()
	}
	return t.udpIdle.Load()
}
