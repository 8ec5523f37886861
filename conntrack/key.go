// Key: the fixed-size, pointer-free flow key, and the seeded hash over it.

package conntrack

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"net/netip"

	"github.com/l4lb/l4lb/l4"
)

// Address family codes, two bits per address in Key.fam. A code, rather
// than the 16 bytes alone, keeps the zero netip.Addr apart from "::".
const (
	famNone uint8 = iota // the zero (invalid) netip.Addr
	famV4
	famV6
)

// Key identifies a flow by protocol and 5-tuple. It is a 38-byte comparable
// value with no pointers, so building one never allocates and tables of keys
// cost the GC nothing to scan.
//
// Each address is stored in 16 bytes, IPv4 as IPv4-mapped IPv6
// (::ffff:a.b.c.d), with a family code beside it: an IPv4 key never equals
// an IPv6 key, and Flow gives back the address family it was built from.
type Key struct {
	src, dst     [16]byte
	sport, dport uint16
	proto        l4.Protocol
	fam          uint8 // src family in bits 0-1, dst family in bits 2-3
}

// KeyOf builds the key of f without allocating. It canonicalises: an
// IPv4-mapped IPv6 address (what a dual-stack socket reports) becomes plain
// IPv4, so the socket path and the packet path agree on one key, and IPv6
// zones are dropped.
func KeyOf(f *l4.Flow) Key {
	k := Key{sport: f.Src.Port(), dport: f.Dst.Port(), proto: f.Proto}
	var sf, df uint8
	k.src, sf = addr16(f.Src.Addr())
	k.dst, df = addr16(f.Dst.Addr())
	k.fam = sf | df<<2
	return k
}

// addr16 returns a's 16-byte form and family code.
func addr16(a netip.Addr) ([16]byte, uint8) {
	switch {
	case a.Is4() || a.Is4In6():
		return a.As16(), famV4
	case a.Is6():
		return a.As16(), famV6
	}
	return [16]byte{}, famNone
}

// addrOf inverts addr16.
func addrOf(b [16]byte, fam uint8) netip.Addr {
	switch fam {
	case famV4:
		return netip.AddrFrom16(b).Unmap()
	case famV6:
		return netip.AddrFrom16(b)
	}
	return netip.Addr{}
}

// equal is k == *o without the runtime.memequal call the compiler emits
// for a 38-byte struct: field by field, the arrays as 8-byte loads.
func (k *Key) equal(o *Key) bool {
	return k.src == o.src && k.dst == o.dst && k.sport == o.sport &&
		k.dport == o.dport && k.proto == o.proto && k.fam == o.fam
}

// Flow returns the (canonical) flow the key was built from.
func (k Key) Flow() l4.Flow {
	return l4.Flow{
		Src:   netip.AddrPortFrom(addrOf(k.src, k.fam&3), k.sport),
		Dst:   netip.AddrPortFrom(addrOf(k.dst, k.fam>>2&3), k.dport),
		Proto: k.proto,
	}
}

// Proto returns the key's protocol.
func (k Key) Proto() l4.Protocol { return k.proto }

// String formats the key for logs ("tcp 192.0.2.1:40000->198.18.0.10:5432").
// It allocates; keep it off per-packet paths.
func (k Key) String() string {
	f := k.Flow()
	return f.Proto.String() + " " + f.Src.String() + "->" + f.Dst.String()
}

// seed is a table's secret hash key. It is random per table so that clients,
// who choose their own addresses and ports, cannot aim flows at one shard or
// one probe chain.
type seed [4]uint64

func newSeed() seed {
	return seed{rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64()}
}

// hash is wyhash's folding (the same mix the Go runtime uses where it lacks
// AES hashing) specialised to the 38-byte key: four 64x64->128 multiplies,
// about a third of the cost of maphash.Comparable on this machine.
func (s *seed) hash(k *Key) uint64 {
	le := binary.LittleEndian
	h := mix(le.Uint64(k.src[:8])^s[1], le.Uint64(k.src[8:])^s[0])
	h = mix(le.Uint64(k.dst[:8])^s[1], le.Uint64(k.dst[8:])^h)
	tail := uint64(k.sport) | uint64(k.dport)<<16 | uint64(k.proto)<<32 | uint64(k.fam)<<40
	return mix(s[2]^38, mix(tail^s[3], h^s[1]))
}

// mix is wyhash's mum: the xor of the high and low halves of a*b.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}
