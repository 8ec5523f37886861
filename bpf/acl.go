// The acl LPM trie: every VIP's access list under its index.

package bpf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/l4lb/l4lb/l4/guard"
)

// aclIndexBits is the part of every acl prefix that is the VIP index.
const aclIndexBits = 32

// mappedV4 is ::ffff:0:0/96, where the 16-byte form keeps IPv4.
var mappedV4 = netip.MustParsePrefix("::ffff:0:0/96")

// aclEntries are the trie entries of acl under VIP index: every network
// with its verdict and, when an IPv6 network shorter than /96 covers
// ::ffff:0:0/96 and no IPv4 0.0.0.0/0 rule is there, an implied /96 entry
// with the default verdict. l4/guard matches an IPv4 client against IPv4
// networks only; without that entry the trie would let ::/0 decide for it.
func aclEntries(index uint32, acl *guard.ACL) map[lbAclKey]lbAclRule {
	out := map[lbAclKey]lbAclRule{}
	if acl == nil {
		return out
	}
	allow, deny := acl.Lists()
	covered := false
	for _, l := range []struct {
		nets    []netip.Prefix
		allowed uint8
	}{{allow, 1}, {deny, 0}} {
		for _, p := range l.nets {
			out[aclKey(index, p)] = lbAclRule{Allowed: l.allowed}
			if p.Addr().Is6() && p.Bits() < mappedV4.Bits() && p.Contains(mappedV4.Addr()) {
				covered = true
			}
		}
	}
	if k := aclKey(index, mappedV4); covered {
		if _, ok := out[k]; !ok {
			var allowed uint8
			if acl.DefaultAllowed() {
				allowed = 1
			}
			out[k] = lbAclRule{Allowed: allowed, Implied: 1}
		}
	}
	return out
}

// aclKey is the trie key of network p (normalized: IPv4 as IPv4) under a
// VIP index.
func aclKey(index uint32, p netip.Prefix) lbAclKey {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return lbAclKey{Prefixlen: uint32(aclIndexBits + bits), VipIndex: index, Addr: addr16(p.Masked().Addr())}
}

// prefix is the inverse of aclKey.
func (k *lbAclKey) prefix() netip.Prefix {
	bits := int(k.Prefixlen) - aclIndexBits
	a := netip.AddrFrom16(k.Addr)
	if a.Is4In6() && bits >= 96 {
		return netip.PrefixFrom(a.Unmap(), bits-96)
	}
	return netip.PrefixFrom(a, bits)
}

// syncACL makes the trie hold exactly acl's entries under index: new and
// changed ones are written first, then stale ones deleted. An ACL already
// written (the same pointer) costs nothing; otherwise the trie is walked
// once.
func (lb *LB) syncACL(index uint32, acl *guard.ACL) error {
	lb.aclMu.Lock()
	defer lb.aclMu.Unlock()
	if cur, known := lb.acls[index]; known && cur == acl {
		return nil
	}
	want := aclEntries(index, acl)
	have, err := lb.aclKeys(index)
	if err != nil {
		return err
	}
	for k, v := range want {
		if err := lb.objs.Acl.Put(&k, &v); err != nil {
			delete(lb.acls, index)
			return fmt.Errorf("acl of vip index %d: write %v: %w", index, k.prefix(), err)
		}
	}
	for _, k := range have {
		if _, keep := want[k]; keep {
			continue
		}
		if err := lb.objs.Acl.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			delete(lb.acls, index)
			return fmt.Errorf("acl of vip index %d: delete %v: %w", index, k.prefix(), err)
		}
	}
	lb.acls[index] = acl
	return nil
}

// aclKeys lists the trie keys under a VIP index.
func (lb *LB) aclKeys(index uint32) ([]lbAclKey, error) {
	var (
		k    lbAclKey
		v    lbAclRule
		keys []lbAclKey
	)
	it := lb.objs.Acl.Iterate()
	for it.Next(&k, &v) {
		if k.VipIndex == index {
			keys = append(keys, k)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("acl of vip index %d: %w", index, err)
	}
	return keys, nil
}

// ACLRules reads back the networks the trie holds for VIP index (the
// implied entry left out), for tests and explain.
func (lb *LB) ACLRules(index uint32) ([]guard.Rule, error) {
	var (
		k   lbAclKey
		v   lbAclRule
		out []guard.Rule
	)
	it := lb.objs.Acl.Iterate()
	for it.Next(&k, &v) {
		if k.VipIndex == index && v.Implied == 0 {
			out = append(out, guard.Rule{Net: k.prefix(), Allowed: v.Allowed != 0})
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("acl of vip index %d: %w", index, err)
	}
	return out, nil
}
