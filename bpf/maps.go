// Typed writers of the balancer's configuration maps.

package bpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/guard"
)

// VIPEntry is how a VIP balances. Its Maglev table is set separately with
// SetMaglev (under the same Index); until then its packets are dropped.
type VIPEntry struct {
	// Index is the VIP's slot in the Maglev and stats maps, below
	// Options.MaxVIPs; the control plane allocates it.
	Index uint32
	// HashKey is what the Maglev hash covers, as balance.FlowHash.
	HashKey l4.HashKey
	// Forward says how packets reach the backend.
	Forward l4.Forward
	// GuardOnly enters a proxy-mode VIP: its packets meet the access
	// list and the SYN rate guard, then pass to the kernel untouched (no
	// conntrack, no table, no counters but the guards').
	GuardOnly bool
	// ConntrackOnly: the VIP leaves xdp mode for proxy mode (a reload)
	// and its flows drain: only flows in the conntrack are forwarded, SYNs
	// and every other packet pass to the kernel, where the proxy serves.
	ConntrackOnly bool
	// KernelFlows: the VIP comes to xdp mode from proxy mode and the
	// proxy's connections drain: a TCP segment other than a SYN that the
	// conntrack does not hold passes to the kernel (the proxy's socket).
	KernelFlows bool
	// NewFlowRate caps the flows a second the VIP inserts into the
	// conntrack (0: no cap); above it new flows are forwarded untracked.
	// Read back as the program holds it: 1e9 / whole nanoseconds.
	NewFlowRate uint32
	// ACL is the VIP's access list (nil: everyone allowed). SetVIP writes
	// its networks into the acl trie under Index; LookupVIP and VIPs
	// leave it nil and say HasACL (ACLRules reads the networks back).
	ACL *guard.ACL
	// HasACL, read back by LookupVIP and VIPs: the VIP has an ACL.
	HasACL bool
	// Capture, read back by LookupVIP and VIPs: a capture samples the
	// VIP (StartCapture owns the flag; SetVIP ignores this field).
	Capture bool
}

// vipValue is the vips map value of e.
func vipValue(e VIPEntry) lbVipValue {
	v := lbVipValue{Index: e.Index, HashKey: uint8(e.HashKey), Forward: uint8(e.Forward)}
	if e.GuardOnly {
		v.Flags |= uint8(lbVipFlagVIP_GUARD_ONLY)
	}
	if e.ConntrackOnly {
		v.Flags |= uint8(lbVipFlagVIP_CT_ONLY)
	}
	if e.KernelFlows {
		v.Flags |= uint8(lbVipFlagVIP_KERNEL_FLOWS)
	}
	if e.ACL != nil {
		v.Flags |= uint8(lbVipFlagVIP_ACL)
		if !e.ACL.DefaultAllowed() {
			v.Flags |= uint8(lbVipFlagVIP_DEFAULT_DENY)
		}
	}
	if e.NewFlowRate > 0 {
		v.NewFlowInterval = rateInterval(e.NewFlowRate)
	}
	return v
}

// vipEntry is the inverse of vipValue (without the ACL's networks).
func vipEntry(v *lbVipValue) VIPEntry {
	e := VIPEntry{Index: v.Index, HashKey: l4.HashKey(v.HashKey), Forward: l4.Forward(v.Forward),
		GuardOnly: v.Flags&uint8(lbVipFlagVIP_GUARD_ONLY) != 0, HasACL: v.Flags&uint8(lbVipFlagVIP_ACL) != 0,
		ConntrackOnly: v.Flags&uint8(lbVipFlagVIP_CT_ONLY) != 0, KernelFlows: v.Flags&uint8(lbVipFlagVIP_KERNEL_FLOWS) != 0,
		Capture: v.Flags&uint8(lbVipFlagVIP_CAPTURE) != 0}
	if v.NewFlowInterval > 0 {
		e.NewFlowRate = uint32(uint64(time.Second) / uint64(v.NewFlowInterval))
	}
	return e
}

// rateInterval is the GCRA interval of rate events a second, in whole
// nanoseconds (at least 1).
func rateInterval(rate uint32) uint32 {
	return uint32(max(uint64(time.Second)/uint64(rate), 1))
}

// BackendEntry is a backend as the data path sees it.
type BackendEntry struct {
	// Addr is the backend's address: the outer destination of ipip.
	Addr netip.Addr
	// MAC is the backend's hardware address, needed by l2 VIPs only.
	MAC net.HardwareAddr
	// Active says the backend takes flows. A conntrack hit on an inactive
	// backend rehashes (the flow moves); keep a draining backend active
	// and out of the Maglev tables instead.
	Active bool
}

// SetSource sets the outer source addresses of encapsulated packets (the
// balancer's own). Either may be the zero Addr: packets that need that
// family are then dropped (counter drop_no_source).
func (lb *LB) SetSource(v4, v6 netip.Addr) error {
	lb.cfgMu.Lock()
	defer lb.cfgMu.Unlock()
	var c lbLbConfig
	if err := lb.objs.Config.Lookup(uint32(0), &c); err != nil {
		return fmt.Errorf("set source: %w", err)
	}
	c.Src4, c.Src6 = [4]byte{}, [16]byte{}
	if v4.IsValid() {
		if !v4.Unmap().Is4() {
			return fmt.Errorf("set source: %v is not IPv4", v4)
		}
		c.Src4 = v4.Unmap().As4()
	}
	if v6.IsValid() {
		if !v6.Is6() || v6.Is4In6() {
			return fmt.Errorf("set source: %v is not IPv6", v6)
		}
		c.Src6 = v6.As16()
	}
	if err := lb.objs.Config.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("set source: %w", err)
	}
	return nil
}

// SetSYNRate sets [xdp] syn_rate_per_source: TCP SYNs (without ACK) a
// second that one source address may send to the VIPs together, bursts up
// to a second's worth; 0 turns the guard off (no rate state is touched).
func (lb *LB) SetSYNRate(perSource uint32) error {
	lb.cfgMu.Lock()
	defer lb.cfgMu.Unlock()
	var c lbLbConfig
	if err := lb.objs.Config.Lookup(uint32(0), &c); err != nil {
		return fmt.Errorf("set syn rate: %w", err)
	}
	c.SynInterval = 0
	if perSource > 0 {
		c.SynInterval = rateInterval(perSource)
	}
	if err := lb.objs.Config.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("set syn rate: %w", err)
	}
	return nil
}

// SetVIP adds or updates a VIP, and its access list in the acl trie: a
// new or changed ACL's networks are written before the entry that turns
// it on, a removed one's deleted after the entry that turns it off, so a
// packet never meets a half-written list's flags. Between the writes of a
// changed list a client may meet the old verdict or the new one.
func (lb *LB) SetVIP(key l4.VIPKey, e VIPEntry) error {
	k, err := vipKeyOf(key)
	if err != nil {
		return fmt.Errorf("set vip: %w", err)
	}
	if err := lb.checkVIPIndex(e.Index); err != nil {
		return fmt.Errorf("set vip %v: %w", key, err)
	}
	switch {
	case e.HashKey > l4.HashFiveTuple:
		return fmt.Errorf("set vip %v: hash key %v unknown", key, e.HashKey)
	case e.Forward > l4.ForwardNAT:
		return fmt.Errorf("set vip %v: forward %v unknown", key, e.Forward)
	}
	v := vipValue(e)
	if e.ACL != nil {
		if err := lb.syncACL(e.Index, e.ACL); err != nil {
			return fmt.Errorf("set vip %v: %w", key, err)
		}
	}
	lb.capMu.Lock()
	if lb.capturing(key) {
		v.Flags |= uint8(lbVipFlagVIP_CAPTURE)
	}
	err = lb.putVIP(&k, &v, ebpf.UpdateAny)
	lb.capMu.Unlock()
	if err != nil {
		return fmt.Errorf("set vip %v: %w", key, err)
	}
	if e.ACL == nil {
		if err := lb.syncACL(e.Index, nil); err != nil {
			return fmt.Errorf("set vip %v: %w", key, err)
		}
	}
	return nil
}

// DeleteVIP removes a VIP and its Maglev table: its packets pass to the
// kernel again. Its conntrack entries stay until PurgeVIP or eviction.
func (lb *LB) DeleteVIP(key l4.VIPKey) error {
	k, err := vipKeyOf(key)
	if err != nil {
		return fmt.Errorf("delete vip: %w", err)
	}
	var v lbVipValue
	if err := lb.objs.Vips.Lookup(&k, &v); err != nil {
		return fmt.Errorf("delete vip %v: %w", key, notFound(err))
	}
	if err := lb.dropVIP(&k, v.Index); err != nil {
		return fmt.Errorf("delete vip %v: %w", key, err)
	}
	if err := lb.objs.Maglev.Delete(v.Index); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete vip %v table: %w", key, err)
	}
	if err := lb.syncACL(v.Index, nil); err != nil {
		return fmt.Errorf("delete vip %v: %w", key, err)
	}
	return nil
}

// LookupVIP returns a VIP's entry (ErrNotFound if absent).
func (lb *LB) LookupVIP(key l4.VIPKey) (VIPEntry, error) {
	k, err := vipKeyOf(key)
	if err != nil {
		return VIPEntry{}, fmt.Errorf("lookup vip: %w", err)
	}
	var v lbVipValue
	if err := lb.objs.Vips.Lookup(&k, &v); err != nil {
		return VIPEntry{}, fmt.Errorf("lookup vip %v: %w", key, notFound(err))
	}
	return vipEntry(&v), nil
}

// SetBackend writes backend index i (1 to MaxBackends-1).
func (lb *LB) SetBackend(i uint32, e BackendEntry) error {
	if err := lb.checkBackendIndex(i); err != nil {
		return fmt.Errorf("set backend: %w", err)
	}
	b, err := backendValue(e)
	if err != nil {
		return fmt.Errorf("set backend %d: %w", i, err)
	}
	return lb.putBackend(i, &b)
}

// putBackend writes backend index i; when its address changes, its next
// hop (resolved for the old address) is cleared first, so no packet to
// the new address follows the old one's.
func (lb *LB) putBackend(i uint32, b *lbBackend) error {
	lb.nhMu.Lock()
	defer lb.nhMu.Unlock()
	var old lbBackend
	if err := lb.objs.Backends.Lookup(i, &old); err != nil {
		return fmt.Errorf("set backend %d: %w", i, err)
	}
	if old.Addr != b.Addr || old.Family != b.Family {
		if err := lb.clearNextHop(i); err != nil {
			return fmt.Errorf("set backend %d: %w", i, err)
		}
	}
	if err := lb.objs.Backends.Put(i, b); err != nil {
		return fmt.Errorf("set backend %d: %w", i, err)
	}
	return nil
}

// backendValue is the backends map value of e.
func backendValue(e BackendEntry) (lbBackend, error) {
	a := e.Addr.Unmap()
	b := lbBackend{Addr: addr16(a), Family: 6}
	switch {
	case !a.IsValid():
		return b, errors.New("invalid address")
	case a.Is4():
		b.Family = 4
	}
	switch len(e.MAC) {
	case 0:
	case 6:
		copy(b.Mac[:], e.MAC)
	default:
		return b, fmt.Errorf("mac %v: want 6 bytes", e.MAC)
	}
	if e.Active {
		b.Flags = uint8(lbBackendFlagBACKEND_ACTIVE)
	}
	return b, nil
}

// DeleteBackend clears backend index i: flows pinned to it rehash on their
// next packet, and table slots still naming it drop (drop_no_backend).
func (lb *LB) DeleteBackend(i uint32) error {
	if err := lb.checkBackendIndex(i); err != nil {
		return fmt.Errorf("delete backend: %w", err)
	}
	if err := lb.putBackend(i, &lbBackend{}); err != nil {
		return fmt.Errorf("delete backend %d: %w", i, err)
	}
	return nil
}

// SetMaglev installs VIP index vipIndex's lookup table: entry s is the
// backend index owning slot s (0: none). The table's length is its size;
// any size from 1 to balance.MaxMaglevSize works (primes balance best). A
// complete new inner map replaces the old one in one update, so packets
// see either table, never a mix.
func (lb *LB) SetMaglev(vipIndex uint32, table []uint32) error {
	if err := lb.checkTable(vipIndex, table); err != nil {
		return fmt.Errorf("set maglev: %w", err)
	}
	spec := lb.inner.Copy()
	spec.Name = "maglev_table"
	spec.MaxEntries = uint32(len(table))
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return fmt.Errorf("set maglev %d: create table: %w", vipIndex, err)
	}
	defer m.Close() // the outer map holds its own reference
	if err := fillTable(m, table); err != nil {
		return fmt.Errorf("set maglev %d: %w", vipIndex, err)
	}
	if err := lb.objs.Maglev.Put(vipIndex, m); err != nil {
		return fmt.Errorf("set maglev %d: swap: %w", vipIndex, err)
	}
	return nil
}

// fillTable writes table into the array m in batches.
func fillTable(m *ebpf.Map, table []uint32) error {
	const chunk = 4096
	keys := make([]uint32, min(chunk, len(table)))
	for lo := 0; lo < len(table); lo += chunk {
		hi := min(lo+chunk, len(table))
		for i := lo; i < hi; i++ {
			keys[i-lo] = uint32(i)
		}
		if _, err := m.BatchUpdate(keys[:hi-lo], table[lo:hi], nil); err != nil {
			return fmt.Errorf("fill table: %w", err)
		}
	}
	return nil
}

// MaglevTable reads back VIP index vipIndex's table (ErrNotFound if none).
func (lb *LB) MaglevTable(vipIndex uint32) ([]uint32, error) {
	var id ebpf.MapID
	if err := lb.objs.Maglev.Lookup(vipIndex, &id); err != nil {
		return nil, fmt.Errorf("maglev table %d: %w", vipIndex, notFound(err))
	}
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return nil, fmt.Errorf("maglev table %d: open: %w", vipIndex, err)
	}
	defer m.Close()
	table := make([]uint32, m.MaxEntries())
	for i := range table {
		if err := m.Lookup(uint32(i), &table[i]); err != nil {
			return nil, fmt.Errorf("maglev table %d slot %d: %w", vipIndex, i, err)
		}
	}
	return table, nil
}

func (lb *LB) checkVIPIndex(i uint32) error {
	if i >= lb.opts.MaxVIPs {
		return fmt.Errorf("vip index %d not below max vips %d", i, lb.opts.MaxVIPs)
	}
	return nil
}

func (lb *LB) checkBackendIndex(i uint32) error {
	if i == 0 || i >= lb.opts.MaxBackends {
		return fmt.Errorf("backend index %d not in [1, %d)", i, lb.opts.MaxBackends)
	}
	return nil
}

func (lb *LB) checkTable(vipIndex uint32, table []uint32) error {
	if err := lb.checkVIPIndex(vipIndex); err != nil {
		return err
	}
	if len(table) == 0 || len(table) > balance.MaxMaglevSize {
		return fmt.Errorf("table size %d not in [1, %d]", len(table), balance.MaxMaglevSize)
	}
	for s, b := range table {
		if b >= lb.opts.MaxBackends {
			return fmt.Errorf("slot %d: backend index %d not below max backends %d", s, b, lb.opts.MaxBackends)
		}
	}
	return nil
}

// notFound maps the map's "no such key" onto ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// Backends calls fn for every written backend entry, by index, until fn
// returns false. A control plane that adopted pinned maps reads them to
// give each backend address its old index: the adopted conntrack's flows
// name backends by index.
func (lb *LB) Backends(fn func(i uint32, e BackendEntry) bool) error {
	var (
		i uint32
		b lbBackend
	)
	it := lb.objs.Backends.Iterate()
	for it.Next(&i, &b) {
		if b.Family == 0 {
			continue // never written, or deleted
		}
		e := BackendEntry{Addr: addrFrom16(b.Addr), Active: b.Flags&uint8(lbBackendFlagBACKEND_ACTIVE) != 0}
		if b.Mac != [6]byte{} {
			e.MAC = net.HardwareAddr(slices.Clone(b.Mac[:]))
		}
		if !fn(i, e) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("backends: %w", err)
	}
	return nil
}

// VIPs calls fn for every VIP entry until fn returns false.
func (lb *LB) VIPs(fn func(k l4.VIPKey, e VIPEntry) bool) error {
	var (
		k lbVipKey
		v lbVipValue
	)
	it := lb.objs.Vips.Iterate()
	for it.Next(&k, &v) {
		key := l4.VIPKey{Addr: netip.AddrPortFrom(addrFrom16(k.Addr), ntohs(k.Port)), Proto: l4.Protocol(k.Proto)}
		if !fn(key, vipEntry(&v)) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("vips: %w", err)
	}
	return nil
}
