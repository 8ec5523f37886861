// maglev: the weighted Maglev lookup table (Eisenbud et al., NSDI 2016) and its picker.

package balance

import (
	"errors"
	"fmt"

	"github.com/l4lb/l4lb/l4"
)

// emptySlot marks a slot not yet filled while a table is built.
const emptySlot = ^uint32(0)

// MaglevTable builds the weighted Maglev lookup table of the given size (a
// prime, at least len(members), at most MaxMaglevSize): entry s is the
// index into members of the backend that owns slot s. It is pure and
// deterministic: the same IDs and weights give the same table on every
// machine, so two l4lb instances (or l4lb and its XDP program) agree.
//
// Each backend walks its own permutation of the slots, (offset + j x skip)
// mod size, with offset and skip hashed from its ID by a fixed hash; in
// turns, each backend claims the next free slot of its permutation. A turn
// comes once per round for the heaviest backend and weight/maxWeight of the
// rounds for the others (a credit counter, so shares match weights to
// within a slot). Turns go in ID order, whatever order members are in;
// with equal weights this is exactly the paper's algorithm. Removing one
// of n backends moves about 1/n of the slots, little more.
func MaglevTable(members []Member, size uint32) ([]uint32, error) {
	order, err := maglevOrder(members, size)
	if err != nil {
		return nil, err
	}
	m := uint64(size)
	pos, skip := make([]uint64, len(order)), make([]uint64, len(order))
	var maxW uint64
	for k, i := range order {
		id := string(members[i].Backend.ID)
		pos[k] = hashString(id, seedOff) % m
		skip[k] = hashString(id, seedSkip)%(m-1) + 1 // in [1, m-1]: m prime, so a full cycle
		maxW = max(maxW, uint64(members[i].Weight))
	}
	table := make([]uint32, size)
	for s := range table {
		table[s] = emptySlot
	}
	credit := make([]uint64, len(order))
	for filled := uint64(0); filled < m; {
		for k, i := range order {
			if credit[k] += uint64(members[i].Weight); credit[k] < maxW {
				continue
			}
			credit[k] -= maxW
			pos[k] = claim(table, pos[k], skip[k], uint32(i))
			if filled++; filled == m {
				break
			}
		}
	}
	return table, nil
}

// claim writes v into the first empty slot of the permutation at p (step
// skip) and returns where that permutation continues. The caller ensures a
// slot is empty; a full-cycle permutation then reaches it.
func claim(table []uint32, p, skip uint64, v uint32) uint64 {
	m := uint64(len(table))
	for table[p] != emptySlot {
		if p += skip; p >= m {
			p -= m
		}
	}
	table[p] = v
	if p += skip; p >= m {
		p -= m
	}
	return p
}

// maglevOrder checks MaglevTable's input and returns the member indices in
// ID order.
func maglevOrder(members []Member, size uint32) ([]int, error) {
	if err := checkMaglevSize(size, len(members)); err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return nil, errors.New("maglev: no members")
	}
	if err := checkMembers(members); err != nil {
		return nil, fmt.Errorf("maglev: %w", err)
	}
	return idOrder(members)
}

// checkMaglevSize accepts a prime size in [n, MaxMaglevSize].
func checkMaglevSize(size uint32, n int) error {
	switch {
	case size > MaxMaglevSize:
		return fmt.Errorf("maglev: table size %d above %d", size, MaxMaglevSize)
	case !isPrime(size):
		return fmt.Errorf("maglev: table size %d is not prime", size)
	case uint64(size) < uint64(n):
		return fmt.Errorf("maglev: table size %d below the member count %d", size, n)
	}
	return nil
}

// isPrime tests n by trial division (at most 2^12 divisions up to
// MaxMaglevSize; build time only).
func isPrime(n uint32) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= uint64(n); d++ {
		if uint64(n)%d == 0 {
			return false
		}
	}
	return true
}

// maglev is the maglev picker: a key hashes to a slot, the slot's owner
// takes the flow. Under the load bound or on a retry the key moves on to
// the following slots, whose owners are the table's (weighted) mix of
// backends in an order fixed by the key.
type maglev struct {
	hashed
	table []uint32
}

func newMaglev(opts Options, members []Member) (*maglev, error) {
	size := opts.MaglevSize
	if size == 0 {
		size = DefaultMaglevSize
	}
	t, err := MaglevTable(members, size)
	if err != nil {
		return nil, err
	}
	return &maglev{hashed: newHashed(opts, members), table: t}, nil
}

// Table returns the lookup table: entry s is the index into the members
// (as given to New) of the backend that owns slot s. It is shared: callers
// must not change it.
func (p *maglev) Table() []uint32 { return p.table }

func (p *maglev) Pick(f *l4.Flow, tried *Tried) *l4.Backend {
	key := flowHash(f, p.key)
	return p.walk(p.table, reduce(key, len(p.table)), key, tried)
}
