package guard

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// Limits are the per-client limits of one VIP; zero values are off.
type Limits struct {
	MaxOpen int // open flows (TCP connections, UDP sessions) from one address
	Rate    int // new flows a second from one address; bursts up to one second's worth
}

// On reports whether any limit is set.
func (l Limits) On() bool { return l.MaxOpen > 0 || l.Rate > 0 }

// Verdict is what Admit decided.
type Verdict uint8

const (
	// Untracked: admitted without being counted (no limit is set, or the
	// table is full of busy clients); do not call Release.
	Untracked Verdict = iota
	// Admitted: counted; call Release once when the flow ends.
	Admitted
	// OverOpen: refused, the client has MaxOpen flows open.
	OverOpen
	// OverRate: refused, the client opened Rate flows within the last second.
	OverRate
)

// Refused reports whether the flow must not be opened.
func (v Verdict) Refused() bool { return v == OverOpen || v == OverRate }

func (v Verdict) String() string {
	switch v {
	case Untracked:
		return "untracked"
	case Admitted:
		return "admitted"
	case OverOpen:
		return "over_open"
	case OverRate:
		return "over_rate"
	}
	return "unknown"
}

// shardCount spreads clients over locks; a power of two.
const shardCount = 64

// DefaultMaxClients bounds the addresses a Clients table tracks at once.
const DefaultMaxClients = 1 << 20

// Clients counts open flows and recent new flows per client address, for
// the per-client limits of one VIP. Its state outlives reloads: a reload
// changes the Limits passed to Admit, not the counts.
type Clients struct {
	seed     maphash.Seed
	perShard int
	shards   [shardCount]shard
}

type shard struct {
	mu        sync.Mutex
	m         map[netip.Addr]*client
	free      []*client
	nextSweep int64    // the caller's clock: sweep on the first Admit after it
	_         [32]byte // keep neighbouring shards' locks off one cache line
}

// sweepEvery is how often a shard forgets clients whose rate state ran out
// (on an Admit, under the shard's lock): without it, a VIP that saw a
// million clients once would keep them until its table filled.
const sweepEvery = int64(2 * time.Second)

// client is one address's state.
type client struct {
	open int
	// tat is the GCRA's theoretical arrival time (ns, the caller's
	// monotonic clock): the rate limit holds while tat - now stays within
	// one second less one interval.
	tat int64
}

// NewClients makes a table for at most maxClients addresses at once
// (DefaultMaxClients when <= 0).
func NewClients(maxClients int) *Clients {
	if maxClients <= 0 {
		maxClients = DefaultMaxClients
	}
	c := &Clients{seed: maphash.MakeSeed(), perShard: max(1, maxClients/shardCount)}
	for i := range c.shards {
		c.shards[i].m = make(map[netip.Addr]*client)
	}
	return c
}

func (c *Clients) shardOf(addr netip.Addr) *shard {
	return &c.shards[maphash.Comparable(c.seed, addr)&(shardCount-1)]
}

// Admit decides whether addr may open a new flow now (ns on a monotonic
// clock shared by every caller) under lim, and counts it when admitted.
func (c *Clients) Admit(addr netip.Addr, lim Limits, now int64) Verdict {
	if !lim.On() {
		return Untracked
	}
	addr = addr.Unmap()
	s := c.shardOf(addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if now >= s.nextSweep {
		s.sweep(now)
		s.nextSweep = now + sweepEvery
	}
	cl := s.m[addr]
	if cl == nil {
		if len(s.m) >= c.perShard && s.sweep(now) == 0 {
			return Untracked // full of busy clients: fail open rather than refuse strangers
		}
		cl = s.get()
		s.m[addr] = cl
	}
	if lim.MaxOpen > 0 && cl.open >= lim.MaxOpen {
		return OverOpen
	}
	if lim.Rate > 0 {
		interval := int64(time.Second) / int64(lim.Rate)
		tat := max(cl.tat, now)
		if tat-now > int64(time.Second)-interval {
			return OverRate
		}
		cl.tat = tat + interval
	}
	cl.open++
	return Admitted
}

// Release ends a flow Admit admitted.
func (c *Clients) Release(addr netip.Addr, now int64) {
	addr = addr.Unmap()
	s := c.shardOf(addr)
	s.mu.Lock()
	if cl := s.m[addr]; cl != nil {
		if cl.open > 0 {
			cl.open--
		}
		s.dropIdle(addr, cl, now)
	}
	s.mu.Unlock()
}

// Open returns the flows addr has open (for status and tests).
func (c *Clients) Open(addr netip.Addr) int {
	addr = addr.Unmap()
	s := c.shardOf(addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cl := s.m[addr]; cl != nil {
		return cl.open
	}
	return 0
}

// Len returns the addresses tracked.
func (c *Clients) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Sweep forgets every address with no open flow whose rate state has run
// out by now; it returns how many.
func (c *Clients) Sweep(now int64) int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.sweep(now)
		s.mu.Unlock()
	}
	return n
}

// dropIdle forgets addr when it holds nothing any more: no open flow, and
// no rate state still in force.
func (s *shard) dropIdle(addr netip.Addr, cl *client, now int64) {
	if cl.open == 0 && cl.tat <= now {
		delete(s.m, addr)
		s.put(cl)
	}
}

func (s *shard) sweep(now int64) int {
	n := 0
	for addr, cl := range s.m {
		if cl.open == 0 && cl.tat <= now {
			delete(s.m, addr)
			s.put(cl)
			n++
		}
	}
	return n
}

// maxFree bounds a shard's spare entries.
const maxFree = 256

func (s *shard) get() *client {
	if n := len(s.free); n > 0 {
		cl := s.free[n-1]
		s.free = s.free[:n-1]
		*cl = client{}
		return cl
	}
	return new(client)
}

func (s *shard) put(cl *client) {
	if len(s.free) < maxFree {
		s.free = append(s.free, cl)
	}
}
