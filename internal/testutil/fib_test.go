// fib_test.go: FIBLookup reports what bpf_fib_lookup answers in a DSR network.

package testutil

import (
	"net/netip"
	"testing"
)

// TestFIBLookup: from the lb's veth, a backend is NO_NEIGH until the lb
// has talked to it, then SUCCESS with the backend's MAC; an oversized
// packet is FRAG_NEEDED with the link MTU; the client, which does not
// forward, gets FWD_DISABLED.
func TestFIBLookup(t *testing.T) {
	d := NewDSR(t, DSROptions{Backends: 1, IPv6: true})
	be := d.Backends[0]
	ifindex := d.linkIndex(t, d.LB)
	for _, dst := range be.Addrs() {
		src := sameFamily(d.Client, dst)
		q := FIBQuery{IfIndex: ifindex, Src: src, Dst: dst}
		if r := FIBLookup(t, d.LB.NS, q); r.Ret != FIBNoNeigh {
			t.Errorf("%s before any traffic: ret %d, want NO_NEIGH", dst, r.Ret)
		}
		ap := netip.AddrPortFrom(dst, 7005)
		d.ServeUDP(t, be, ap)
		if err := sendDF(t, d.LB, ap, 10); err != nil {
			t.Fatal(err)
		}
		r := FIBLookup(t, d.LB.NS, q)
		if r.Ret != FIBSuccess || r.DMAC.String() != be.MAC.String() || r.SMAC.String() != d.LB.MAC.String() || r.IfIndex != ifindex {
			t.Errorf("%s after traffic: %+v, want SUCCESS %s -> %s on %d", dst, r, d.LB.MAC, be.MAC, ifindex)
		}
		q.TotLen = d.LB.MTU + 1
		if r := FIBLookup(t, d.LB.NS, q); r.Ret != FIBFragNeeded || r.MTU != d.LB.MTU {
			t.Errorf("%s, %d bytes: %+v, want FRAG_NEEDED with MTU %d", dst, q.TotLen, r, d.LB.MTU)
		}
		cq := FIBQuery{IfIndex: d.linkIndex(t, d.Client), Src: src, Dst: dst}
		if r := FIBLookup(t, d.Client.NS, cq); r.Ret != FIBFwdDisabled {
			t.Errorf("%s from the client: ret %d, want FWD_DISABLED", dst, r.Ret)
		}
	}
}

func (d *DSR) linkIndex(t *testing.T, h *DSRHost) int {
	t.Helper()
	var idx int
	h.NS.MustDo(t, func() error {
		var err error
		idx, err = ifIndex(h.Link)
		return err
	})
	return idx
}
