// Types callers see: flow states, end reasons, entry copies and stats.

package conntrack

import (
	"fmt"

	"github.com/l4lb/l4lb/l4"
)

// State is where a flow is in its life, as the data plane reports it.
type State uint8

// States. Insert starts TCP flows in StateNew and all others in StateActive.
const (
	StateActive      State = iota // a UDP (or other datagram) session: its only state
	StateNew                      // TCP: client seen, backend leg not yet up
	StateEstablished              // TCP: both legs up
	StateClosing                  // TCP: a FIN or RST seen, draining
)

func (s State) String() string {
	switch s {
	case StateActive:
		return "active"
	case StateNew:
		return "new"
	case StateEstablished:
		return "established"
	case StateClosing:
		return "closing"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// initialState is the state Insert gives a flow of protocol p.
func initialState(p l4.Protocol) State {
	if p == l4.TCP {
		return StateNew
	}
	return StateActive
}

// Reason says why an entry ended.
type Reason uint8

// End reasons.
const (
	ReasonDeleted Reason = iota // Delete
	ReasonExpired               // idle longer than its protocol's timeout
	ReasonEvicted               // pushed out by an insert into a full shard
	ReasonClosed                // the table was closed
	numReasons
)

func (r Reason) String() string {
	switch r {
	case ReasonDeleted:
		return "deleted"
	case ReasonExpired:
		return "expired"
	case ReasonEvicted:
		return "evicted"
	case ReasonClosed:
		return "closed"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Entry is a copy of a flow's entry. Changing it changes nothing in the
// table.
type Entry struct {
	Backend *l4.Backend
	Owner   any // what the data plane hung on the flow (e.g. a UDP session)
	State   State
}

// Stats is a snapshot of a table's counters. Counters only grow; Entries
// is the live count when each shard was read.
type Stats struct {
	Entries int

	Inserts    uint64 // entries added
	Duplicates uint64 // inserts that found the key present (count released)
	Rebinds    uint64

	Deleted uint64
	Expired uint64
	Evicted uint64
	Closed  uint64

	Lookups, Hits, Misses uint64
}
