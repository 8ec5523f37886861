// Shared vocabulary of the balancers: members, options, tried sets.

package balance

import (
	"errors"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Member is one eligible backend of a snapshot with its effective weight.
type Member struct {
	Backend *l4.Backend
	Weight  uint32 // > 0
}

// DefaultMaglevSize is the Maglev lookup table size (a prime).
const DefaultMaglevSize = 65537

// MaxMaglevSize bounds Options.MaglevSize: the table costs 4 bytes a slot
// and is rebuilt on every health change.
const MaxMaglevSize = 1 << 24

// DefaultLeastTime is the RTT least_time assumes for a backend with no sample
// yet: about a LAN handshake, so a new backend is neither starved nor flooded.
const DefaultLeastTime = time.Millisecond

// MaxMembers bounds the member count, which keeps every weight sum (and 100
// times it, for bounded loads) inside uint64.
const MaxMembers = 1 << 20

// Options select and tune an algorithm. The zero value is round robin.
type Options struct {
	Algorithm l4.Algorithm
	// HashKey applies to SourceHash and Maglev.
	HashKey l4.HashKey
	// MaglevSize is the Maglev table size; 0 means DefaultMaglevSize. Must be prime.
	MaglevSize uint32
	// BalanceFactor bounds the load of the hashing algorithms, in percent of
	// the mean live flows per weight (125 = 1.25x); 0 turns bounding off,
	// otherwise it must be at least 100.
	BalanceFactor uint32
	// LeastTimeDefault is the RTT assumed for a backend with no sample yet;
	// 0 means DefaultLeastTime.
	LeastTimeDefault time.Duration
	// LeastTimeBias is added to every RTT in the least_time score.
	LeastTimeBias time.Duration
}

// ErrNoBackend is what callers report when Pick finds no eligible backend.
var ErrNoBackend = errors.New("no eligible backend")

// MaxTries bounds how many backends one flow may try (first pick plus retries).
const MaxTries = 16

// Tried is the small set of backends a flow has already tried and that a
// retry must skip. The zero value is empty; it lives on the caller's stack.
type Tried struct {
	n int
	b [MaxTries]*l4.Backend
}

// Add records b. Beyond MaxTries entries it is ignored.
func (t *Tried) Add(b *l4.Backend) {
	if t.n < MaxTries {
		t.b[t.n] = b
		t.n++
	}
}

// Has reports whether b was tried. A nil Tried has nothing.
func (t *Tried) Has(b *l4.Backend) bool {
	if t == nil {
		return false
	}
	for i := 0; i < t.n; i++ {
		if t.b[i] == b {
			return true
		}
	}
	return false
}

// Len returns how many backends were recorded.
func (t *Tried) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// Picker chooses a backend for a new flow. Implementations are immutable and
// safe for concurrent use.
type Picker interface {
	// Pick returns a backend for f that is not in tried (which may be nil)
	// and counts one live flow on it (Backend.Acquire): the caller must
	// Release it when the flow ends or its connect fails. It returns nil
	// when every member was tried or there are none.
	Pick(f *l4.Flow, tried *Tried) *l4.Backend
}
