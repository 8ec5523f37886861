package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// vipRefs keeps vip_refs and vip_ports in step with vips (maps.h): a
// conntrack hit reads its VIP from vip_refs by index, only packets to a
// forwarding VIP's port look the conntrack up before the VIP, and only
// packets to some VIP's port look vips up at all.
type vipRefs struct {
	ports map[lbVipKey]portUse // every VIP
	words [2048]uint64         // vip_ports as last written
}

// portUse is a VIP's port as vip_ports indexes it (the network-order
// bytes read natively, lbVipKey.Port) and whether the VIP forwards.
type portUse struct {
	port    uint16
	forward bool
}

// use is v's entry in vipRefs.ports.
func use(k *lbVipKey, v *lbVipValue) portUse {
	return portUse{port: k.Port, forward: v.Flags&uint8(lbVipFlagVIP_GUARD_ONLY) == 0}
}

// putVIP writes a VIP's vip_refs entry, then its vips entry (the one that
// makes the index reachable from a packet), then clears the entry under
// the index it had before, if any, and updates vip_ports.
func (lb *LB) putVIP(k *lbVipKey, v *lbVipValue, flags ebpf.MapUpdateFlags) error {
	lb.refMu.Lock()
	defer lb.refMu.Unlock()
	var old lbVipValue
	hadOld := lb.objs.Vips.Lookup(k, &old) == nil
	if !hadOld && flags == ebpf.UpdateExist {
		return fmt.Errorf("vips: %w", ebpf.ErrKeyNotExist)
	}
	// The port's bits first: a packet to a port without VIP_PORT_ANY
	// never looks vips up.
	prev, hadPrev := lb.refs.ports[*k]
	lb.refs.ports[*k] = use(k, v)
	if err := lb.syncPort(k.Port); err != nil {
		return err
	}
	if err := lb.objs.VipRefs.Put(v.Index, &lbVipRef{Key: *k, Value: *v}); err != nil {
		return fmt.Errorf("vip_refs %d: %w", v.Index, err)
	}
	if err := lb.objs.Vips.Update(k, v, flags); err != nil {
		// Put vip_refs back as vips still has it.
		if hadOld {
			err = errors.Join(err, lb.objs.VipRefs.Put(old.Index, &lbVipRef{Key: *k, Value: old}))
		}
		if !hadOld || old.Index != v.Index {
			err = errors.Join(err, lb.clearRef(k, v.Index))
		}
		if hadPrev {
			lb.refs.ports[*k] = prev
		} else {
			delete(lb.refs.ports, *k)
		}
		return errors.Join(err, lb.syncPort(k.Port))
	}
	if hadOld && old.Index != v.Index {
		if err := lb.clearRef(k, old.Index); err != nil {
			return err
		}
	}
	return nil
}

// dropVIP clears a VIP's vip_refs entry, deletes its vips entry and
// updates vip_ports.
func (lb *LB) dropVIP(k *lbVipKey, index uint32) error {
	lb.refMu.Lock()
	defer lb.refMu.Unlock()
	if err := lb.clearRef(k, index); err != nil {
		return err
	}
	if err := lb.objs.Vips.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	delete(lb.refs.ports, *k)
	return lb.syncPort(k.Port)
}

// clearRef zeroes vip_refs[index] when it still holds k (refMu held).
func (lb *LB) clearRef(k *lbVipKey, index uint32) error {
	var r lbVipRef
	if err := lb.objs.VipRefs.Lookup(index, &r); err != nil {
		return fmt.Errorf("vip_refs %d: %w", index, err)
	}
	if r.Key != *k {
		return nil
	}
	if err := lb.objs.VipRefs.Put(index, &lbVipRef{}); err != nil {
		return fmt.Errorf("vip_refs %d: %w", index, err)
	}
	return nil
}

// syncPort writes port's word of vip_ports when it changed (refMu held):
// two bits per port, VIP_PORT_FORWARD and VIP_PORT_ANY (lb.c).
func (lb *LB) syncPort(port uint16) error {
	w := uint32(port >> 5)
	var bits uint64
	for _, u := range lb.refs.ports {
		if u.port>>5 != port>>5 {
			continue
		}
		shift := 2 * (u.port & 31)
		bits |= 2 << shift
		if u.forward {
			bits |= 1 << shift
		}
	}
	if bits == lb.refs.words[w] {
		return nil
	}
	if err := lb.objs.VipPorts.Put(w, bits); err != nil {
		return fmt.Errorf("vip_ports %d: %w", w, err)
	}
	lb.refs.words[w] = bits
	return nil
}

// loadVIPRefs fills vip_ports and vip_refs from the vips map (empty when
// new, the old process's VIPs when adopted).
func (lb *LB) loadVIPRefs() error {
	lb.refMu.Lock()
	defer lb.refMu.Unlock()
	lb.refs.ports = map[lbVipKey]portUse{}
	var (
		k lbVipKey
		v lbVipValue
	)
	it := lb.objs.Vips.Iterate()
	for it.Next(&k, &v) {
		if err := lb.objs.VipRefs.Put(v.Index, &lbVipRef{Key: k, Value: v}); err != nil {
			return fmt.Errorf("vip_refs %d: %w", v.Index, err)
		}
		lb.refs.ports[k] = use(&k, &v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("vips: %w", err)
	}
	for _, u := range lb.refs.ports {
		if err := lb.syncPort(u.port); err != nil {
			return err
		}
	}
	return nil
}
