package balance

import "fmt"

// New builds the Picker that opts selects over members. Members must have
// distinct backends and weights > 0; an empty list gives a Picker that
// always returns nil.
func New(opts Options, members []Member) (Picker, error) {
	for i, m := range members {
		if m.Backend == nil || m.Weight == 0 {
			return nil, fmt.Errorf("member %d: nil backend or zero weight", i)
		}
	}
	switch opts.Algorithm {
	case RoundRobin:
		return newRoundRobin(members), nil
	}
	return nil, fmt.Errorf("algorithm %s not implemented", opts.Algorithm)
}
