// Conversions between l4's vocabulary and the map layouts.

package bpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/l4lb/l4lb/l4"
)

// addr16 is a's 16-byte map form: IPv4 as ::ffff:a.b.c.d, zone dropped.
func addr16(a netip.Addr) [16]byte { return a.As16() }

// addrFrom16 is the inverse of addr16: mapped IPv4 becomes plain IPv4.
func addrFrom16(b [16]byte) netip.Addr { return netip.AddrFrom16(b).Unmap() }

// htons converts a port to the network-order value the maps hold as a
// native uint16 (the bytes in memory are big-endian).
func htons(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

// ntohs is the inverse of htons.
func ntohs(p uint16) uint16 { return htons(p) }

// checkProto accepts the protocols the program balances.
func checkProto(p l4.Protocol) error {
	if p != l4.TCP && p != l4.UDP {
		return fmt.Errorf("protocol %v: only tcp and udp are balanced", p)
	}
	return nil
}

// vipKeyOf is the vips map key of k.
func vipKeyOf(k l4.VIPKey) (lbVipKey, error) {
	if !k.Addr.IsValid() {
		return lbVipKey{}, fmt.Errorf("vip %v: invalid address", k)
	}
	if err := checkProto(k.Proto); err != nil {
		return lbVipKey{}, fmt.Errorf("vip %v: %w", k, err)
	}
	return lbVipKey{Addr: addr16(k.Addr.Addr()), Port: htons(k.Addr.Port()), Proto: uint8(k.Proto)}, nil
}

// flowKeyOf is the conntrack key of f (Src = client, Dst = VIP).
func flowKeyOf(f l4.Flow) lbFlowKey {
	return lbFlowKey{
		Client:     addr16(f.Src.Addr()),
		Vip:        addr16(f.Dst.Addr()),
		ClientPort: htons(f.Src.Port()),
		VipPort:    htons(f.Dst.Port()),
		Proto:      uint8(f.Proto),
	}
}

// flow is the inverse of flowKeyOf.
func (k *lbFlowKey) flow() l4.Flow {
	return l4.Flow{
		Src:   netip.AddrPortFrom(addrFrom16(k.Client), ntohs(k.ClientPort)),
		Dst:   netip.AddrPortFrom(addrFrom16(k.Vip), ntohs(k.VipPort)),
		Proto: l4.Protocol(k.Proto),
	}
}

// matchesVIP says whether the flow key is to VIP key v.
func (k *lbFlowKey) matchesVIP(v *lbVipKey) bool {
	return k.Vip == v.Addr && k.VipPort == v.Port && k.Proto == v.Proto
}
