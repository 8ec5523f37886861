package guard

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// ACL is an immutable access list: networks allowed and denied as client
// sources. The most specific network containing an address decides (so
// `deny 10.0.0.0/8` with `allow 10.1.2.0/24` lets 10.1.2.x in and keeps
// the rest of 10/8 out, in either order); an address in no network is
// allowed when the allow list is empty, refused otherwise. A nil *ACL
// allows everyone.
type ACL struct {
	rules4    map[uint64]bool // key4(network) -> allowed
	rules6    map[key6]bool   // key6(network) -> allowed
	lens4     []int           // distinct IPv4 prefix lengths, longest first
	lens6     []int           // distinct IPv6 prefix lengths, longest first
	otherwise bool            // the verdict for an address in no network
	allow     []netip.Prefix
	deny      []netip.Prefix
}

// NewACL builds the access list of allow and deny; nil when both are
// empty (everyone is allowed). IPv4-mapped IPv6 networks are taken as
// IPv4. A network in both lists is an error.
func NewACL(allow, deny []netip.Prefix) (*ACL, error) {
	if len(allow) == 0 && len(deny) == 0 {
		return nil, nil
	}
	a := &ACL{rules4: map[uint64]bool{}, rules6: map[key6]bool{}, otherwise: len(allow) == 0}
	seen := make(map[netip.Prefix]bool, len(allow)+len(deny))
	for _, list := range []struct {
		nets    []netip.Prefix
		allowed bool
	}{{allow, true}, {deny, false}} {
		for _, p := range list.nets {
			p, err := normalize(p)
			if err != nil {
				return nil, err
			}
			if was, dup := seen[p]; dup && was != list.allowed {
				return nil, fmt.Errorf("acl: %s is both allowed and denied", p)
			}
			seen[p] = list.allowed
			if list.allowed {
				a.allow = append(a.allow, p)
			} else {
				a.deny = append(a.deny, p)
			}
			if p.Addr().Is4() {
				a.rules4[ruleKey4(p.Addr(), p.Bits())] = list.allowed
				a.lens4 = addLen(a.lens4, p.Bits())
			} else {
				a.rules6[ruleKey6(p.Addr(), p.Bits())] = list.allowed
				a.lens6 = addLen(a.lens6, p.Bits())
			}
		}
	}
	return a, nil
}

// normalize masks p and turns an IPv4-mapped network into IPv4.
func normalize(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return p, fmt.Errorf("acl: invalid network %v", p)
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return p, fmt.Errorf("acl: %s mixes IPv4-mapped and IPv6 addresses", p)
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// addLen inserts n into lens, kept sorted longest first without repeats.
func addLen(lens []int, n int) []int {
	i, found := slices.BinarySearchFunc(lens, n, func(have, want int) int { return want - have })
	if found {
		return lens
	}
	return slices.Insert(lens, i, n)
}

// Allowed reports whether a client at addr may open a flow. It does not
// allocate: one map lookup per distinct prefix length of addr's family,
// longest first, until one matches.
func (a *ACL) Allowed(addr netip.Addr) bool {
	if a == nil {
		return true
	}
	if _, allowed, ok := a.lookup(addr); ok {
		return allowed
	}
	return a.otherwise
}

// lookup finds the most specific network containing addr: its length and
// verdict.
func (a *ACL) lookup(addr netip.Addr) (bits int, allowed, ok bool) {
	addr = addr.Unmap()
	if addr.Is4() {
		for _, n := range a.lens4 {
			if allowed, ok := a.rules4[ruleKey4(addr, n)]; ok {
				return n, allowed, true
			}
		}
		return 0, false, false
	}
	for _, n := range a.lens6 {
		if allowed, ok := a.rules6[ruleKey6(addr, n)]; ok {
			return n, allowed, true
		}
	}
	return 0, false, false
}

// ruleKey4 is the map key of addr's /bits network: length and masked
// address in one word (cheaper to hash than a netip.Prefix).
func ruleKey4(addr netip.Addr, bits int) uint64 {
	b := addr.As4()
	u := binary.BigEndian.Uint32(b[:])
	if bits < 32 {
		u &^= 1<<(32-bits) - 1
	}
	return uint64(bits)<<32 | uint64(u)
}

// key6 is the map key of an IPv6 network.
type key6 struct {
	hi, lo uint64
	bits   int
}

func ruleKey6(addr netip.Addr, bits int) key6 {
	b := addr.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	switch {
	case bits <= 0:
		hi, lo = 0, 0
	case bits < 64:
		hi &^= 1<<(64-bits) - 1
		lo = 0
	case bits < 128:
		lo &^= 1<<(128-bits) - 1
	}
	return key6{hi, lo, bits}
}

// Rule is one network of an access list and its verdict.
type Rule struct {
	Net     netip.Prefix
	Allowed bool
}

// Match says which rule decides addr; ok is false when none does (the
// verdict is then the default: allowed only when there is no allow list).
// For explain and tests; Allowed is the hot path.
func (a *ACL) Match(addr netip.Addr) (r Rule, ok bool) {
	if a == nil {
		return Rule{}, false
	}
	bits, allowed, ok := a.lookup(addr)
	if !ok {
		return Rule{}, false
	}
	p, _ := addr.Unmap().Prefix(bits)
	return Rule{Net: p, Allowed: allowed}, true
}

// Lists returns the allow and deny networks, normalized (for the XDP
// program's LPM trie and for status).
func (a *ACL) Lists() (allow, deny []netip.Prefix) {
	if a == nil {
		return nil, nil
	}
	return slices.Clone(a.allow), slices.Clone(a.deny)
}

// DefaultAllowed is the verdict for an address in no network.
func (a *ACL) DefaultAllowed() bool { return a == nil || a.otherwise }
