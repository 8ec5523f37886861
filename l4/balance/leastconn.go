// least_conn: fewest live flows per weight, scanned from a random start.

package balance

import (
	"math/rand/v2"

	"github.com/l4lb/l4lb/l4"
)

// leastConn picks the member with the fewest live flows per weight. The
// count is taken at pick time (Acquire), so a burst of simultaneous picks
// sees each other's flows and spreads. The scan starts at a random member:
// a fixed start would hand every tie (an idle VIP, say) to member 0.
type leastConn struct {
	pool
}

func newLeastConn(members []Member) *leastConn {
	return &leastConn{pool: newPool(members)}
}

func (p *leastConn) Pick(_ *l4.Flow, tried *Tried) *l4.Backend {
	i := p.leastLoaded(rand.IntN(len(p.backends)), tried)
	if i >= 0 {
		if b := p.takeUncapped(i); b != nil {
			return b // the common case, inline
		}
	}
	for range pickRaces {
		if i < 0 {
			return nil
		}
		if b := p.take(i); b != nil {
			return b
		}
		i = p.leastLoaded(rand.IntN(len(p.backends)), tried)
	}
	return nil
}
