// The flow table flow sync reads and writes: the XDP program's.

package reconcile

import "github.com/l4lb/l4lb/l4/plane"

// FlowTable is the XDP program's flow table; nil while no program runs.
func (r *Runtime) FlowTable() plane.FlowTable {
	if x := r.xdpAt.Load(); x != nil {
		return x
	}
	return nil
}
