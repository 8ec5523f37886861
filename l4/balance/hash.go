// Fixed, seedless 64-bit hashing of flows and backend identities.

package balance

import (
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/l4lb/l4lb/l4"
)

// The hashing algorithms promise that every l4lb instance with the same
// config sends a flow to the same backend and builds the same tables, across
// restarts and machines. So nothing here is seeded at run time (no maphash,
// no random seed): the constants are part of the wire contract, and changing
// one remaps every flow of every hashing VIP.
const (
	golden   = 0x9e3779b97f4a7c15 // 2^64/phi, splitmix64's increment
	seedRing = 0x676e69726c346c00 // "\x00l4lring": ring vnode positions
	seedOff  = 0x66666f76656c676d // "mglevoff": Maglev offsets
	seedSkip = 0x70696b7376656c67 // "glevskip": Maglev skips
	seedPick = 0x6b6369706c346c00 // "\x00l4lpick": fallback scan starts

	// Flow key lanes: each input word is xored with its own constant
	// before it is multiplied, so no lane starts from zero and swapping
	// source and destination changes the hash. The values are wyhash's
	// secret primes, murmur3's and xxHash64's: odd, about half their bits
	// set, with no structure a flow could line up with.
	laneSrcHi = 0xa0761d6478bd642f
	laneSrcLo = 0xe7037ed1a0b428db
	lanePort  = 0x8ebc6af09c88c6e3
	laneDstHi = 0x589965cc75374cc3
	laneDstLo = 0x1d8e4e27c47d124f
	laneMix   = 0xc2b2ae3d27d4eb4f
	laneFinal = 0x27d4eb2f165667c5
)

// mix64 is splitmix64's finalizer (Stafford's "Mix13"): a bijection on
// uint64 in which flipping any input bit flips each output bit with
// probability close to 1/2. Two multiplies, three shifts, no memory.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// absorb folds one word into a running hash. For a fixed h it is a
// bijection in w (xor, then a bijective mix), so two keys that differ in one
// word never collide at that step. Build time (IDs): strength over speed.
func absorb(h, w uint64) uint64 { return mix64(h ^ w) }

// fold multiplies two words into 128 bits and xors the halves (the
// "mul-fold" of wyhash and xxh3): one MUL instruction, and every input bit
// reaches the high half of the product. The lanes of a key fold
// independently (the CPU overlaps them); one more fold of their xor with a
// fixed constant finishes the avalanche. A flow hashes in about 10 cycles
// whatever the key. A fold is zero when one operand is, so an IPv6 client
// whose upper 64 bits equal laneSrcHi would hash by that half only; no
// real prefix does.
func fold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// flowHash hashes the parts of f that k selects. Addresses are hashed as
// their 16 bytes (IPv4 as IPv4-mapped IPv6), so a client hashes the same
// whichever way the address was parsed. A nil flow hashes like a zero one.
func flowHash(f *l4.Flow, k l4.HashKey) uint64 {
	if f == nil {
		f = new(l4.Flow) // zeroed only on this path
	}
	hi, lo := addrWords(f.Src.Addr())
	h := fold(hi^laneSrcHi, lo^laneSrcLo)
	switch k {
	case l4.HashSrcIP:
	case l4.HashSrcIPPort:
		h ^= fold(uint64(f.Src.Port())^lanePort, laneMix)
	default:
		hi, lo = addrWords(f.Dst.Addr())
		ports := uint64(f.Src.Port())<<32 | uint64(f.Dst.Port())<<16 | uint64(f.Proto)
		h ^= fold(hi^laneDstHi, lo^laneDstLo) ^ fold(ports^lanePort, laneMix)
	}
	return fold(h^laneFinal, golden)
}

// addrWords returns a's 16-byte form as two big-endian words. IPv4 takes a
// shortcut to the same words (::ffff:a.b.c.d): the 16-byte copy costs a
// store-forwarding stall that the 4-byte one does not, and IPv4 is the
// common client.
func addrWords(a netip.Addr) (uint64, uint64) {
	if a.Is4() {
		b := a.As4()
		return 0, 0xffff<<32 | uint64(binary.BigEndian.Uint32(b[:]))
	}
	b := a.As16()
	return be64(b[:8]), be64(b[8:])
}

func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// hashString hashes s (a backend ID) with seed: the length first, then the
// bytes as little-endian 8-byte words, the last one zero-padded. Build time
// only; the byte order is fixed so that every platform agrees.
func hashString(s string, seed uint64) uint64 {
	h := absorb(seed, uint64(len(s)))
	var w uint64
	for i := 0; i < len(s); i++ {
		w |= uint64(s[i]) << (8 * (i % 8))
		if i%8 == 7 {
			h, w = absorb(h, w), 0
		}
	}
	if len(s)%8 != 0 {
		h = absorb(h, w)
	}
	return h
}

// reduce maps a uniform 64-bit hash onto [0, n) without a division
// (Lemire's multiply-shift: the high word of h*n).
func reduce(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// FlowHash is the hash the hashing algorithms compute for f with key k.
// The XDP program computes the same function in C: a flow's hash, and so
// its Maglev slot, is the same in proxy and xdp mode.
func FlowHash(f *l4.Flow, k l4.HashKey) uint64 { return flowHash(f, k) }

// Slot maps a flow hash onto a table of n slots, as a Maglev lookup does.
func Slot(h uint64, n int) int { return reduce(h, n) }
