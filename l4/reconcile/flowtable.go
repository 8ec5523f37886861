// The flow table flow sync reads and writes: the XDP program's
// conntrack and the proxy TCP VIPs' affinity pins.

package reconcile

import (
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/xdpplane"
)

// FlowTable is the table flow sync shares: the XDP program's flows (when
// it runs) and the affinity pins of the proxy VIPs that keep them.
func (r *Runtime) FlowTable() plane.FlowTable {
	return syncTable{r: r, x: r.xdpAt.Load()}
}

// syncTable is the flow table of one call: the program and VIPs of the
// moment.
type syncTable struct {
	r *Runtime
	x *xdpplane.Program // nil: none runs
}

// PinnedFlows implements plane.FlowTable: the program's flows, then the
// pins of every proxy VIP with affinity.
func (t syncTable) PinnedFlows(within time.Duration, fn func(plane.SyncedFlow) bool) (int, error) {
	fromPeers, more := 0, true
	if t.x != nil {
		n, err := t.x.PinnedFlows(within, func(f plane.SyncedFlow) bool {
			more = fn(f)
			return more
		})
		if err != nil {
			return n, err
		}
		fromPeers += n
	}
	for _, v := range *t.r.index.Load() {
		pt, ok := v.dp.(plane.PinTable)
		if !ok {
			continue
		}
		fromPeers += pt.SyncedPins(within, func(f plane.SyncedFlow) bool {
			more = more && fn(f)
			return more
		})
	}
	return fromPeers, nil
}

// InstallFlows implements plane.FlowTable: runs of flows go to the
// program, pins to their VIP's plane.
func (t syncTable) InstallFlows(flows []plane.SyncedFlow, results []plane.InstallResult) {
	for i := 0; i < len(flows); {
		if flows[i].Pin {
			results[i] = t.installPin(flows[i])
			i++
			continue
		}
		j := i + 1
		for j < len(flows) && !flows[j].Pin {
			j++
		}
		if t.x != nil {
			t.x.InstallFlows(flows[i:j], results[i:j])
		} else {
			for k := i; k < j; k++ {
				results[k] = plane.InstallForeignVIP
			}
		}
		i = j
	}
}

// installPin installs f into the pins of its VIP, if a proxy VIP here
// keeps pins.
func (t syncTable) installPin(f plane.SyncedFlow) plane.InstallResult {
	key := l4.VIPKey{Addr: f.Flow.Dst, Proto: f.Flow.Proto}
	for _, v := range *t.r.index.Load() {
		if v.key != key {
			continue
		}
		if pt, ok := v.dp.(plane.PinTable); ok {
			return pt.InstallPin(f)
		}
	}
	return plane.InstallForeignVIP
}
