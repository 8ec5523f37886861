// neighmark.go: marking the neighbour entries l4lb makes (NDA_PROTOCOL), so that a later l4lb finds the ones a crashed one left.

package netif

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// NeighProtocol is the protocol l4lb's neighbour entries carry (netlink's
// NDA_PROTOCOL, `ip neigh show proto 76`): an entry with it is l4lb's to
// remove when no backend needs it, also one an earlier l4lb left behind.
// No routing daemon in iproute2's rt_protos uses 76 ('L').
const NeighProtocol = 76

// neigh is a neighbour entry as a dump returns it, with its protocol.
type neigh struct {
	netlink.Neigh
	proto uint8
}

// ours reports whether e is an entry l4lb made and may remove: marked,
// managed, and not made static by hand since.
func (e *neigh) ours() bool {
	return e.proto == NeighProtocol && isManaged(&e.Neigh) && e.State&nudStatic == 0
}

// neighList dumps the neighbour entries of family (FAMILY_V4 or V6) on
// ifindex (0: every link), each with its protocol.
func (h *Handle) neighList(ifindex, family int) ([]neigh, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETNEIGH, unix.NLM_F_DUMP)
	req.Sockets = h.raw
	req.AddData(&netlink.Ndmsg{Family: uint8(family), Index: uint32(ifindex)})
	var out []neigh
	var perr error
	err := req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWNEIGH, func(m []byte) bool {
		e, err := parseNeigh(m)
		if err != nil {
			perr = err
			return false
		}
		if ifindex == 0 || e.LinkIndex == ifindex {
			out = append(out, e)
		}
		return true
	})
	if err == nil {
		err = perr
	}
	return out, err
}

// parseNeigh decodes one RTM_NEWNEIGH message and its NDA_PROTOCOL.
func parseNeigh(m []byte) (neigh, error) {
	n, err := netlink.NeighDeserialize(m)
	if err != nil {
		return neigh{}, fmt.Errorf("neighbour message: %w", err)
	}
	e := neigh{Neigh: *n}
	attrs, err := nl.ParseRouteAttr(m[(&netlink.Ndmsg{}).Len():])
	if err != nil {
		return neigh{}, fmt.Errorf("neighbour attributes: %w", err)
	}
	for _, a := range attrs {
		if a.Attr.Type == netlink.NDA_PROTOCOL && len(a.Value) == 1 {
			e.proto = a.Value[0]
		}
	}
	return e, nil
}

// setMarked creates k as a managed entry marked l4lb's, or turns a
// dynamic one into one (netlink's NeighSet cannot send the protocol).
func (h *Handle) setMarked(k neighKey) error {
	fam := unix.AF_INET6
	if k.addr.Is4() {
		fam = unix.AF_INET
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWNEIGH, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	req.Sockets = h.raw
	req.AddData(&netlink.Ndmsg{Family: uint8(fam), Index: uint32(k.ifindex)})
	req.AddData(nl.NewRtAttr(netlink.NDA_DST, k.addr.AsSlice()))
	req.AddData(nl.NewRtAttr(netlink.NDA_FLAGS_EXT, nl.Uint32Attr(netlink.NTF_EXT_MANAGED)))
	req.AddData(nl.NewRtAttr(netlink.NDA_PROTOCOL, []byte{NeighProtocol}))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// Sweep removes the entries marked l4lb's (NeighProtocol) on any link
// that the last Ensure did not ask for: those an earlier l4lb left when
// it was killed, for backends the config no longer has. Call it once,
// after the first Ensure with the whole config. Entries without the mark
// (an operator's, another manager's) and static ones are never touched.
// It returns the entries it removed.
func (n *Neighbors) Sweep() ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	want := map[neighKey]bool{}
	for _, k := range n.hops {
		want[k] = true
	}
	var removed []string
	var errs []error
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := dump(func() ([]neigh, error) { return n.h.neighList(0, fam) })
		if err != nil {
			errs = append(errs, fmt.Errorf("neighbours: %w", err))
			continue
		}
		for i := range list {
			k, ok := keyOf(&list[i])
			if !ok || want[k] || !list[i].ours() {
				continue
			}
			if err := n.h.deleteNeighbor(k); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(n.owned, k)
			removed = append(removed, k.String())
		}
	}
	return removed, errors.Join(errs...)
}

func keyOf(e *neigh) (neighKey, bool) {
	a, ok := netip.AddrFromSlice(e.IP)
	return neighKey{e.LinkIndex, a.Unmap()}, ok
}
