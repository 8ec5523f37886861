/* csum.h: the IPv4 header checksum, the only checksum the programs write
 * (inner packets are never modified, so their L4 checksums stay valid). */
#ifndef L4LB_CSUM_H
#define L4LB_CSUM_H

#include <linux/ip.h>
#include "consts.h"

/* ipv4_csum returns the checksum of an option-less IPv4 header whose check
 * field is zero: the ones' complement of the folded sum of its ten 16-bit
 * words. The sum is byte-order neutral, so network-order words go in as
 * they are and the result is stored as it is. */
static __always_inline __u16 ipv4_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < IPV4_HLEN / 2; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

#endif
