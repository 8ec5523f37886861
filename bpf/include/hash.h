/* hash.h: the flow hash and slot reduction of l4/balance/hash.go, in C.
 * BPF has no 64x64->128 multiply, so the high word is built from 32-bit
 * limbs; everything else is a line-by-line transcription. */
#ifndef L4LB_HASH_H
#define L4LB_HASH_H

#include <bpf/bpf_endian.h>
#include "consts.h"
#include "structs.h"

/* mulhi64 is the high word of the 128-bit product a*b (Go: bits.Mul64). */
static __always_inline __u64 mulhi64(__u64 a, __u64 b)
{
	__u64 a_lo = (__u32)a, a_hi = a >> 32;
	__u64 b_lo = (__u32)b, b_hi = b >> 32;
	__u64 p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
	/* At most 3 * (2^32 - 1): no overflow. */
	__u64 mid = (p0 >> 32) + (__u32)p1 + (__u32)p2;
	return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

/* fold xors the halves of a*b (Go: fold). */
static __always_inline __u64 fold(__u64 a, __u64 b)
{
	return mulhi64(a, b) ^ (a * b);
}

/* be64_at reads 8 bytes of an address as a big-endian word (Go: be64). */
static __always_inline __u64 be64_at(const __u8 *b)
{
	__u64 w;
	__builtin_memcpy(&w, b, 8);
	return bpf_be64_to_cpu(w);
}

/* flow_hash is Go's flowHash(&l4.Flow{Src: client, Dst: vip, Proto}, key). */
static __always_inline __u64 flow_hash(const struct flow_key *f, __u8 key)
{
	__u64 h = fold(be64_at(f->client) ^ LANE_SRC_HI, be64_at(f->client + 8) ^ LANE_SRC_LO);
	__u64 sport = bpf_ntohs(f->client_port);

	if (key == HASH_SRC_IP_PORT) {
		h ^= fold(sport ^ LANE_PORT, LANE_MIX);
	} else if (key != HASH_SRC_IP) {
		__u64 ports = sport << 32 | (__u64)bpf_ntohs(f->vip_port) << 16 | f->proto;
		h ^= fold(be64_at(f->vip) ^ LANE_DST_HI, be64_at(f->vip + 8) ^ LANE_DST_LO) ^
		     fold(ports ^ LANE_PORT, LANE_MIX);
	}
	return fold(h ^ LANE_FINAL, HASH_GOLDEN);
}

/* reduce maps h onto [0, n) as the high word of h*n (Go: reduce). n fits 32
 * bits, so two 32x32 products suffice. */
static __always_inline __u32 reduce(__u64 h, __u32 n)
{
	return ((h >> 32) * n + (((__u64)(__u32)h * n) >> 32)) >> 32;
}

#endif
