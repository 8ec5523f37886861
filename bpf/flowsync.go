// Writing conntrack entries from user space: flow sync installs the flows
// a peer balancer pinned.

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/l4lb/l4lb/l4"
)

// ErrFlowExists: the table has an entry for the flow already (the local
// one wins over a peer's).
var ErrFlowExists = errors.New("bpf: the flow has a conntrack entry")

// InsertFlow writes a conntrack entry for f (Src = client, Dst = VIP)
// unless it has one: e's backend index, last-seen time (CLOCK_MONOTONIC,
// MonotonicNow's scale), FIN and synced marks. The program then treats it
// as one of its own: a hit keeps the backend while it is usable, a SYN
// rewrites it, LRU pressure evicts it.
func (lb *LB) InsertFlow(f l4.Flow, e FlowEntry) error {
	k := flowKeyOf(f)
	s := lbFlowState{LastSeen: uint64(max(e.LastSeen, 0)), Backend: e.Backend}
	if e.Closing {
		s.Flags |= uint32(lbFlowFlagFLOW_FIN)
	}
	if e.Synced {
		s.Flags |= uint32(lbFlowFlagFLOW_SYNCED)
	}
	// touched 0: the first packet refreshes last_seen at once.
	if err := lb.objs.Conntrack.Update(&k, &s, ebpf.UpdateNoExist); err != nil {
		if errors.Is(err, ebpf.ErrKeyExist) {
			return ErrFlowExists
		}
		return fmt.Errorf("insert flow %v: %w", f, err)
	}
	return nil
}
