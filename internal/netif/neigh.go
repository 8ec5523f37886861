// neigh.go: keeping backend next hops resolved with kernel-managed neighbour entries.

package netif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nudValid are the states in which the kernel, and bpf_fib_lookup, use an
// entry's MAC (the kernel's NUD_VALID).
const nudValid = netlink.NUD_PERMANENT | netlink.NUD_NOARP | netlink.NUD_REACHABLE |
	netlink.NUD_PROBE | netlink.NUD_STALE | netlink.NUD_DELAY

// nudStatic are the states an administrator sets by hand; they are never
// ours to change.
const nudStatic = netlink.NUD_PERMANENT | netlink.NUD_NOARP

// neighKey identifies one neighbour entry: an address (unmapped, no zone)
// on one link.
type neighKey struct {
	ifindex int
	addr    netip.Addr
}

func (k neighKey) String() string { return fmt.Sprintf("%s on ifindex %d", k.addr, k.ifindex) }

// Neighbors keeps a kernel-managed neighbour entry for the next hop of
// every backend it is given, so that bpf_fib_lookup finds a MAC for it.
// Methods are safe for concurrent use.
type Neighbors struct {
	h *Handle

	mu       sync.Mutex
	wanted   []netip.Addr            // the last Ensure's backends, for Refresh
	hops     map[netip.Addr]neighKey // backend -> its next hop at the last Ensure
	owned    map[neighKey]struct{}   // entries this Neighbors created or took over
	verified bool                    // the kernel kept NTF_EXT_MANAGED once
}

// NewNeighbors returns an empty set bound to h's namespace. h must outlive
// it.
func (h *Handle) NewNeighbors() *Neighbors {
	return &Neighbors{h: h, hops: map[netip.Addr]neighKey{}, owned: map[neighKey]struct{}{}}
}

// Ensure makes the set of managed entries match the next hops of addrs
// (the gateway of a routed backend, else the backend itself): it adds
// those missing, including ones the kernel flushed when a link went down,
// and removes the ones it added earlier that no next hop needs any more.
// It never changes an entry that is PERMANENT or NOARP, or a managed entry
// it did not make. Backends local to this host need no entry. Ensure is
// idempotent; an address it cannot route gives an error, the others are
// still handled.
func (n *Neighbors) Ensure(addrs []netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wanted = slices.Clone(addrs)
	hops, errs := n.nextHops(addrs)
	n.hops = hops
	want := map[neighKey]struct{}{}
	for _, k := range hops {
		want[k] = struct{}{}
	}
	t := newNeighTable(n.h)
	for k := range want {
		errs = append(errs, n.keep(t, k))
	}
	for k := range n.owned {
		if _, ok := want[k]; !ok {
			errs = append(errs, n.release(t, k))
		}
	}
	return errors.Join(errs...)
}

// Refresh is Ensure with the addresses of the last Ensure: call it on a
// timer or on link events to put back entries the kernel flushed and to
// follow route changes.
func (n *Neighbors) Refresh() error {
	n.mu.Lock()
	addrs := n.wanted
	n.mu.Unlock()
	return n.Ensure(addrs)
}

// Close removes every entry this Neighbors added.
func (n *Neighbors) Close() error { return n.Ensure(nil) }

// Resolved returns the MAC that frames toward backend addr would carry now
// (its next hop's), and whether there is one that bpf_fib_lookup would use
// (REACHABLE, STALE, DELAY, PROBE or static).
func (n *Neighbors) Resolved(addr netip.Addr) (net.HardwareAddr, bool) {
	k, ok := n.hopOf(addr)
	if !ok {
		return nil, false
	}
	e, err := newNeighTable(n.h).get(k)
	if err != nil || e == nil {
		return nil, false
	}
	return validMAC(e)
}

// hopOf returns addr's next hop as of the last Ensure, or asks the kernel.
func (n *Neighbors) hopOf(addr netip.Addr) (neighKey, bool) {
	n.mu.Lock()
	k, ok := n.hops[addr]
	n.mu.Unlock()
	if ok {
		return k, true
	}
	r, err := n.h.RouteTo(addr)
	if err != nil || r.Local {
		return neighKey{}, false
	}
	return neighKey{r.IfIndex, r.NextHop()}, true
}

// nextHops routes every address; local ones need no neighbour.
func (n *Neighbors) nextHops(addrs []netip.Addr) (map[netip.Addr]neighKey, []error) {
	hops := map[netip.Addr]neighKey{}
	var errs []error
	for _, a := range addrs {
		r, err := n.h.RouteTo(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("next hop of %s: %w", a, err))
			continue
		}
		if !r.Local {
			hops[a] = neighKey{r.IfIndex, r.NextHop()}
		}
	}
	return hops, errs
}

// keep makes k a managed entry unless someone else owns it.
func (n *Neighbors) keep(t *neighTable, k neighKey) error {
	e, err := t.get(k)
	if err != nil {
		return err
	}
	if e != nil && e.State&nudStatic != 0 {
		delete(n.owned, k) // an administrator's now: never touch it
		return nil
	}
	if e != nil && t.ours(k) {
		n.owned[k] = struct{}{} // ours, perhaps made by an earlier l4lb
		return nil
	}
	if e != nil && isManaged(e) {
		return nil // another manager's: the kernel keeps it
	}
	// Missing (new, flushed when its link went down, deleted by hand) or
	// dynamic (learned from traffic): make it managed.
	if err := n.h.setManaged(k); err != nil {
		return err
	}
	n.owned[k] = struct{}{}
	return n.verify(k)
}

// verify checks once that the kernel kept the managed flag: kernels
// before 5.16 ignore the attribute and make a plain entry.
func (n *Neighbors) verify(k neighKey) error {
	if n.verified {
		return nil
	}
	e, err := newNeighTable(n.h).get(k)
	if err != nil {
		return err
	}
	if e == nil || !isManaged(e) {
		_ = n.h.deleteNeighbor(k)
		delete(n.owned, k)
		return fmt.Errorf("managed neighbour %s: %w", k, ErrNotSupported)
	}
	n.verified = true
	return nil
}

// release deletes an entry this Neighbors made, unless it has since become
// someone else's (made static, or no longer managed).
func (n *Neighbors) release(t *neighTable, k neighKey) error {
	delete(n.owned, k)
	e, err := t.get(k)
	if err != nil || e == nil || e.State&nudStatic != 0 || !isManaged(e) {
		return err
	}
	return n.h.deleteNeighbor(k)
}

func isManaged(e *netlink.Neigh) bool { return e.FlagsExt&netlink.NTF_EXT_MANAGED != 0 }

func validMAC(e *netlink.Neigh) (net.HardwareAddr, bool) {
	if e.State&nudValid == 0 || len(e.HardwareAddr) == 0 {
		return nil, false
	}
	return e.HardwareAddr, true
}

// setManaged creates k as a managed entry marked l4lb's (NeighProtocol),
// or turns a dynamic one into one; the kernel starts resolving it at once.
func (h *Handle) setManaged(k neighKey) error {
	err := h.setMarked(k)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("managed neighbour %s: %v: %w", k, err, ErrNotSupported)
	}
	if err != nil {
		return fmt.Errorf("managed neighbour %s: %w", k, err)
	}
	return nil
}

func (h *Handle) deleteNeighbor(k neighKey) error {
	err := h.nl.NeighDel(&netlink.Neigh{LinkIndex: k.ifindex, IP: k.addr.AsSlice()})
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete neighbour %s: %w", k, err)
	}
	return nil
}

// neighTable reads neighbour entries, one dump per link and family per
// use, so that an Ensure over many backends costs a few dumps.
type neighTable struct {
	h    *Handle
	byIf map[[2]int][]neigh // {ifindex, family}
}

func newNeighTable(h *Handle) *neighTable {
	return &neighTable{h: h, byIf: map[[2]int][]neigh{}}
}

// get returns k's entry, or nil when there is none.
func (t *neighTable) get(k neighKey) (*netlink.Neigh, error) {
	e, err := t.entry(k)
	if e == nil {
		return nil, err
	}
	return &e.Neigh, nil
}

// ours reports whether k's entry is l4lb's (neigh.ours).
func (t *neighTable) ours(k neighKey) bool {
	e, _ := t.entry(k)
	return e != nil && e.ours()
}

// entry returns k's entry with its protocol, or nil when there is none.
func (t *neighTable) entry(k neighKey) (*neigh, error) {
	fam := netlink.FAMILY_V6
	if k.addr.Is4() {
		fam = netlink.FAMILY_V4
	}
	id := [2]int{k.ifindex, fam}
	list, ok := t.byIf[id]
	if !ok {
		var err error
		list, err = dump(func() ([]neigh, error) { return t.h.neighList(k.ifindex, fam) })
		if err != nil {
			return nil, fmt.Errorf("neighbours of ifindex %d: %w", k.ifindex, err)
		}
		t.byIf[id] = list
	}
	for i := range list {
		if a, ok := netip.AddrFromSlice(list[i].IP); ok && a.Unmap() == k.addr {
			return &list[i], nil
		}
	}
	return nil, nil
}
