// Explain: what the program would do with a flow's next packet, read
// from its maps without writing them.

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
)

// Path is the program's select_backend (include/conntrack.h) for a flow,
// step by step, as the maps hold it at one moment.
type Path struct {
	// VIP is the flow's VIP entry.
	VIP VIPEntry
	// Flow is the flow's conntrack entry; nil when it has none.
	Flow *FlowEntry
	// FlowUsable: the entry's backend exists and is active, so a packet
	// of the flow keeps it (unless it is a TCP SYN, which rehashes).
	FlowUsable bool
	// Hash is balance.FlowHash of the flow with the VIP's hash key: the
	// function the program computes (the tests hold the two together).
	Hash uint64
	// Slot is the flow's slot in the VIP's Maglev table of TableSize
	// slots (0: the VIP has no table) and SlotBackend the backend index
	// it holds (0: empty).
	Slot, TableSize, SlotBackend uint32
	// SlotUsable: SlotBackend exists and is active.
	SlotUsable bool
}

// Backend returns the backend index that a packet of the flow goes to,
// 0 when it is dropped (drop_no_backend). syn says the packet is a TCP SYN
// without ACK: a new connection, which takes the Maglev choice even over a
// conntrack entry.
func (p Path) Backend(syn bool) uint32 {
	if p.Flow != nil && p.FlowUsable && !syn {
		return p.Flow.Backend
	}
	if p.SlotUsable {
		return p.SlotBackend
	}
	return 0
}

// Explain reads what the program does with the next packet of f (Src =
// client, Dst = VIP): the VIP entry, the conntrack entry and the Maglev
// slot with their backends. It writes nothing: a lookup from user space
// neither refreshes the entry nor marks it recently used in the LRU (the
// kernel's syscall path skips the LRU reference bit), and the per-packet
// counters do not move. ErrNotFound: f's destination is no VIP.
func (lb *LB) Explain(f l4.Flow) (Path, error) {
	var p Path
	vip, err := lb.LookupVIP(l4.VIPKey{Addr: f.Dst, Proto: f.Proto})
	if err != nil {
		return p, fmt.Errorf("explain: %w", err)
	}
	p.VIP = vip
	switch fe, err := lb.LookupFlow(f); {
	case err == nil:
		p.Flow = &fe
		if p.FlowUsable, err = lb.usable(fe.Backend); err != nil {
			return p, fmt.Errorf("explain: %w", err)
		}
	case !errors.Is(err, ErrNotFound):
		return p, fmt.Errorf("explain: %w", err)
	}
	p.Hash = balance.FlowHash(&f, vip.HashKey)
	if err := lb.maglevSlot(&p); err != nil {
		return p, fmt.Errorf("explain: %w", err)
	}
	if p.SlotUsable, err = lb.usable(p.SlotBackend); err != nil {
		return p, fmt.Errorf("explain: %w", err)
	}
	return p, nil
}

// maglevSlot fills in p's slot from the VIP's table: its size is the
// inner map's own, read from the same map as the slot, as the program does.
func (lb *LB) maglevSlot(p *Path) error {
	var id ebpf.MapID
	if err := lb.objs.Maglev.Lookup(p.VIP.Index, &id); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil // no table: the program drops (drop_no_backend)
		}
		return fmt.Errorf("maglev table %d: %w", p.VIP.Index, err)
	}
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return fmt.Errorf("maglev table %d: open: %w", p.VIP.Index, err)
	}
	defer m.Close()
	p.TableSize = m.MaxEntries()
	if p.TableSize == 0 {
		return nil
	}
	p.Slot = uint32(balance.Slot(p.Hash, int(p.TableSize)))
	if err := m.Lookup(p.Slot, &p.SlotBackend); err != nil {
		return fmt.Errorf("maglev table %d slot %d: %w", p.VIP.Index, p.Slot, err)
	}
	return nil
}

// usable is the program's usable_backend: index i is written and active.
func (lb *LB) usable(i uint32) (bool, error) {
	if i == 0 || i >= lb.opts.MaxBackends {
		return false, nil
	}
	var b lbBackend
	if err := lb.objs.Backends.Lookup(i, &b); err != nil {
		return false, fmt.Errorf("backend %d: %w", i, err)
	}
	return b.Family != 0 && b.Flags&uint8(lbBackendFlagBACKEND_ACTIVE) != 0, nil
}
