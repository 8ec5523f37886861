// Options: what a table may be told, its defaults and their checks.

package conntrack

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults for zero Options fields.
const (
	// DefaultTCPIdle matches the kernel's TCP keepalive time: a connection
	// quiet for longer without keepalives is most likely gone.
	DefaultTCPIdle    = 2 * time.Hour
	DefaultUDPIdle    = 30 * time.Second // as Linux conntrack's UDP timeout
	DefaultMaxEntries = 1 << 20
	DefaultShards     = 64
	DefaultTick       = time.Second
	DefaultSweepBatch = 1024

	// minShardCap is the fewest entries a shard is made to hold: Shards is
	// lowered for small tables so that per-shard eviction stays sensible.
	minShardCap = 64
	maxShards   = 1 << 12
)

// ErrBadOptions is wrapped by New's errors.
var ErrBadOptions = errors.New("conntrack: bad options")

// Options configure a Table. The zero value of each field means its default.
type Options struct {
	TCPIdle time.Duration // idle timeout of TCP flows
	UDPIdle time.Duration // idle timeout of UDP and any other protocol

	// MaxEntries is the hard cap on live entries. Each shard holds
	// MaxEntries/shards, and an insert into a full shard evicts.
	MaxEntries int

	// Shards is a power of two, at most 4096; lowered so each shard holds
	// at least 64 entries.
	Shards int

	// Tick is the clock granularity and the sweep period, at least 1ms.
	Tick time.Duration

	// SweepBatch is the most slab slots scanned per shard per tick.
	SweepBatch int

	// Uncounted makes a table that owns no live-flow counts: Insert and
	// Rebind take none and ending an entry releases none.
	Uncounted bool

	// Now is the clock the sweeper reads (default time.Now); lookups never
	// read it. Tests pass a fake and call Sweep.
	Now func() time.Time

	// OnStart and OnEnd are called after an entry starts or ends, outside
	// the shard locks; OnEnd after the entry's count is released. They must
	// be safe for concurrent use, and may call any method but Sweep and
	// Close (OnEnd runs on the sweeper for expiries; those would deadlock).
	OnStart func(Key, Entry)
	OnEnd   func(Key, Entry, Reason)
}

// withDefaults fills zero fields and checks the rest.
func (o Options) withDefaults() (Options, error) {
	o.TCPIdle = orDefault(o.TCPIdle, DefaultTCPIdle)
	o.UDPIdle = orDefault(o.UDPIdle, DefaultUDPIdle)
	o.Tick = orDefault(o.Tick, DefaultTick)
	o.MaxEntries = orDefault(o.MaxEntries, DefaultMaxEntries)
	o.Shards = orDefault(o.Shards, DefaultShards)
	o.SweepBatch = orDefault(o.SweepBatch, DefaultSweepBatch)
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := o.check(); err != nil {
		return o, fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	for o.Shards > 1 && o.MaxEntries/o.Shards < minShardCap {
		o.Shards /= 2
	}
	return o, nil
}

// check rejects values no default can mend.
func (o Options) check() error {
	if err := o.checkIdle(); err != nil {
		return err
	}
	switch {
	case o.Tick < time.Millisecond:
		return fmt.Errorf("tick %v is under a millisecond", o.Tick)
	case o.MaxEntries < 0 || o.MaxEntries > math.MaxUint32/2:
		return fmt.Errorf("max entries %d out of range", o.MaxEntries)
	case o.Shards < 0 || o.Shards > maxShards || o.Shards&(o.Shards-1) != 0:
		return fmt.Errorf("shards %d: want a power of two up to %d", o.Shards, maxShards)
	case o.SweepBatch < 0:
		return fmt.Errorf("sweep batch %d is negative", o.SweepBatch)
	}
	return nil
}

// checkIdle rejects idle timeouts that are negative or too many ticks.
func (o Options) checkIdle() error {
	switch {
	case o.TCPIdle < 0 || o.UDPIdle < 0:
		return errors.New("idle timeouts must not be negative")
	case o.Tick > 0 && max(o.TCPIdle, o.UDPIdle)/o.Tick >= math.MaxInt32:
		// Ages are uint32 tick differences; keep them far from wrapping.
		return fmt.Errorf("idle timeout %v is too many ticks of %v", max(o.TCPIdle, o.UDPIdle), o.Tick)
	}
	return nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// ticks converts an idle timeout to whole clock ticks, rounding up so that
// no flow expires early.
func ticks(d, tick time.Duration) uint32 {
	return uint32((d + tick - 1) / tick)
}
