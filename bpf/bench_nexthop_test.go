// The next hops benchLB writes: what the control plane writes from the
// FIB namespace's routes and neighbours. (scripts/bench-xdp-compare.sh
// replaces this file with an empty benchNextHops to time a tree from
// before the nexthops map with the same benchmarks.)

package bpf

import "testing"

// benchNextHops gives backends 1..n (odd IPv4, even IPv6, all behind lb0)
// their next hop.
func benchNextHops(b testing.TB, lb *LB, fn *fibNet, n uint32) {
	for i := uint32(1); i <= n; i++ {
		a := be4Near
		if i%2 == 0 {
			a = be6Near
		}
		must(b, lb.SetNextHop(i, a, NextHop{DstMAC: macNear, SrcMAC: fn.mac0, IfIndex: fn.lb0, MTU: 1500}))
	}
}
