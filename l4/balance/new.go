// New: options checked once, then the algorithm's picker built over a private copy of the members.

package balance

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/l4lb/l4lb/l4"
)

// New builds the Picker that opts selects over members. Members must have
// distinct backends and weights > 0; an empty list gives a Picker that
// always returns nil. The Picker keeps its own copy of the list. Hashing
// algorithms depend only on the members' IDs and weights, never on their
// order; callers still sort by ID (see l4/snapshot) so that every other
// algorithm's tie order is stable too.
func New(opts Options, members []Member) (Picker, error) {
	if err := checkOptions(opts, len(members)); err != nil {
		return nil, err
	}
	if err := checkMembers(members); err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return none{}, nil
	}
	switch opts.Algorithm {
	case l4.RoundRobin:
		return newRoundRobin(members), nil
	case l4.LeastConn:
		return newLeastConn(members), nil
	case l4.P2C:
		return newP2C(members), nil
	case l4.LeastTime:
		return newLeastTime(members, leastTimeDefault(opts), uint64(max(opts.LeastTimeBias, 0))), nil
	case l4.SourceHash:
		return newRing(opts, members)
	case l4.Maglev:
		return newMaglev(opts, members)
	case l4.Random:
		return newRandom(members), nil
	}
	return nil, fmt.Errorf("algorithm %s not implemented", opts.Algorithm)
}

// checkOptions rejects what no algorithm could honour, before any build.
func checkOptions(o Options, n int) error {
	var errs []error
	if int(o.Algorithm) >= len(l4.AlgorithmNames()) {
		errs = append(errs, fmt.Errorf("unknown %s", o.Algorithm))
	}
	if int(o.HashKey) >= len(l4.HashKeyNames()) {
		errs = append(errs, fmt.Errorf("unknown %s", o.HashKey))
	}
	if o.BalanceFactor != 0 && o.BalanceFactor < 100 {
		errs = append(errs, fmt.Errorf("balance factor %d%% below 100%%", o.BalanceFactor))
	}
	if o.LeastTimeBias < 0 {
		errs = append(errs, fmt.Errorf("negative least_time bias %s", o.LeastTimeBias))
	}
	if o.LeastTimeDefault < 0 {
		errs = append(errs, fmt.Errorf("negative least_time default %s", o.LeastTimeDefault))
	}
	if o.Algorithm == l4.Maglev && o.MaglevSize != 0 {
		if err := checkMaglevSize(o.MaglevSize, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkMembers enforces New's contract on the member list.
func checkMembers(members []Member) error {
	if len(members) > MaxMembers {
		return fmt.Errorf("%d members, at most %d", len(members), MaxMembers)
	}
	for i, m := range members {
		if m.Backend == nil || m.Weight == 0 {
			return fmt.Errorf("member %d: nil backend or zero weight", i)
		}
	}
	return nil
}

func leastTimeDefault(o Options) uint64 {
	if o.LeastTimeDefault == 0 {
		return uint64(DefaultLeastTime)
	}
	return uint64(o.LeastTimeDefault)
}

// idOrder returns the member indices sorted by backend ID, or an error when
// an ID repeats: the hashing algorithms place backends by ID, so two with
// one ID would be one backend twice.
func idOrder(members []Member) ([]int, error) {
	order := make([]int, len(members))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(members[a].Backend.ID, members[b].Backend.ID) })
	for k := 1; k < len(order); k++ {
		if id := members[order[k]].Backend.ID; id == members[order[k-1]].Backend.ID {
			return nil, fmt.Errorf("backend %q listed twice", id)
		}
	}
	return order, nil
}
