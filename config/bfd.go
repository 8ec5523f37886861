// bfd = { ... } under [[bgp.peer]]: a BFD session beside the BGP session.

package config

import (
	"fmt"
	"time"
)

// BFD is a peer's BFD session (RFC 5880/5881, single hop, asynchronous):
// the router learns within Interval x Multiplier that this balancer is
// gone, where BGP alone waits for the hold time.
type BFD struct {
	// Interval is the transmit and receive interval while the session is
	// up; default 300ms.
	Interval time.Duration
	// Multiplier is the detect multiplier: packets missed before the
	// session goes down; default 3.
	Multiplier int
}

// buildBFD resolves a peer's bfd table; nil when the peer has none.
func buildBFD(l *layer, peer rawTable) *BFD {
	if !peer.has("bfd") {
		return nil
	}
	if peer.table("bfd") == nil {
		v, _ := peer.lookup("bfd")
		if _, ok := v.(map[string]any); !ok {
			l.problem("bfd", "must be a table such as { interval = \"100ms\", multiplier = 3 }, not %s", tomlType(v))
			return nil
		}
	}
	out := &BFD{}
	resolveKeys(l.sub("bfd"), bfdKeys, peer.table("bfd"), nil, out)
	return out
}

// formatBFD writes a peer's bfd table after its [[bgp.peer]] keys.
func formatBFD(w *tomlWriter, b *BFD) {
	if b == nil {
		return
	}
	w.table("bgp.peer.bfd")
	writeKeys(w, bfdKeys, b)
}

// bfdSummary is a peer's BFD in Diff's one line.
func bfdSummary(b *BFD) string {
	if b == nil {
		return ""
	}
	return fmt.Sprintf(" bfd %s x %d", fmtDuration(b.Interval), b.Multiplier)
}
