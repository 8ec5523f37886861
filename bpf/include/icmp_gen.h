/* icmp_gen.h: the answer to a packet that would exceed the MTU toward its
 * backend once encapsulated: the frame itself becomes the ICMP error back
 * to the client (IPv4 "fragmentation needed", type 3 code 4; IPv6 "packet
 * too big", type 2), from the VIP, with the MTU left for the inner packet,
 * and leaves by XDP_TX, so the client's path MTU discovery lowers its
 * packet size instead of its flow stalling. Bounded by one GCRA shared by
 * all CPUs: ICMP_TOO_BIG_RATE a second (bursts of a second's worth), as the
 * kernel's net.ipv4.icmp_msgs_per_sec; above it the packet is dropped
 * (drop_too_big), as it is for an ICMP error (never answered with one,
 * RFC 1122 3.2.2) and for a packet too short to quote in full. */
#ifndef L4LB_ICMP_GEN_H
#define L4LB_ICMP_GEN_H

#include "encap.h"
#include "rate.h"

/* The quote: the client's packet from its IP header on, as much as the
 * error may carry: 576 bytes in all for IPv4 (RFC 1812 4.3.2.3), 1280 for
 * IPv6 (RFC 4443 2.4). A packet too big for a tunnel is longer. */
#define ICMP4_QUOTE (576 - IPV4_HLEN - 8)
#define ICMP6_QUOTE (1280 - IPV6_HLEN - 8)
#define ICMP_FRAG_NEEDED 4
#define ICMP_TOS 0xc0		/* precedence "internetwork control", as the kernel's errors */
#define IPV6_MIN_MTU 1280
#define IPV4_MIN_MTU 68
#define ICMP_TOO_BIG_RATE 1000
#define CSUM_CHUNK 512		/* bpf_csum_diff's largest span on older kernels */

/* The too-big answers' rate state (one entry, shared by the CPUs). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rate_state);
} icmp_rate SEC(".maps");

/* csum_fold folds a 32-bit ones' complement sum and complements it. */
static __always_inline __u16 csum_fold(__s64 sum)
{
	__u32 s = (__u32)sum;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s;
}

/* csum_add adds len bytes at b (a constant multiple of 4) to sum. */
static __always_inline __s64 csum_add(void *b, __u32 len, __s64 sum)
{
	return bpf_csum_diff(NULL, 0, b, len, (__u32)sum);
}

/* too_big_admitted takes one answer from the shared rate. */
static __always_inline int too_big_admitted(void)
{
	__u32 zero = 0;
	struct rate_state *st = bpf_map_lookup_elem(&icmp_rate, &zero);
	return st && rate_admit(st, bpf_ktime_get_coarse_ns(), 1000000000ULL / ICMP_TOO_BIG_RATE);
}

/* reply_l2 turns the frame's MACs around: back where it came from. */
static __always_inline void reply_l2(struct ethhdr *eth)
{
	__u8 mac[ETH_ALEN];
	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
}

/* make_room puts hdr_len bytes between the L2 header and the client's
 * packet and cuts the frame to l3_off + hdr_len + quote bytes (all
 * constants at the call site). It returns the new data pointer or NULL. */
static __always_inline void *make_room(struct xdp_md *ctx, __u32 l3_off, __u32 hdr_len, __u32 quote)
{
	void *data = push_l2(ctx, hdr_len, l3_off);
	if (!data)
		return NULL;
	long excess = (long)((void *)(long)ctx->data_end - data) - (l3_off + hdr_len + quote);
	if (excess < 0 || bpf_xdp_adjust_tail(ctx, -(int)excess))
		return NULL;
	data = (void *)(long)ctx->data;
	if (data + l3_off + hdr_len + quote > (void *)(long)ctx->data_end)
		return NULL;
	return data;
}

/* too_big4 builds the IPv4 "fragmentation needed" answer in the frame. */
static __always_inline __u32 too_big4(struct xdp_md *ctx, __u32 l3_off, __u32 mtu)
{
	void *data = make_room(ctx, l3_off, IPV4_HLEN + sizeof(struct icmp_hdr), ICMP4_QUOTE);
	if (!data)
		return COUNTER_DROP_TOO_BIG;
	struct iphdr *ip = data + l3_off;
	struct icmp_hdr *icmp = (void *)(ip + 1);
	struct iphdr *quoted = (void *)(icmp + 1);
	if ((void *)(quoted + 1) > (void *)(long)ctx->data_end ||
	    (void *)icmp + sizeof(*icmp) + ICMP4_QUOTE > (void *)(long)ctx->data_end)
		return COUNTER_DROP_TOO_BIG;
	reply_l2(data);
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = ICMP_TOS;
	ip->tot_len = bpf_htons(IPV4_HLEN + sizeof(*icmp) + ICMP4_QUOTE);
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = OUTER_TTL;
	ip->protocol = PROTO_ICMP;
	ip->check = 0;
	ip->saddr = quoted->daddr;
	ip->daddr = quoted->saddr;
	ip->check = ipv4_csum(ip);
	icmp->type = ICMP_DEST_UNREACH;
	icmp->code = ICMP_FRAG_NEEDED;
	icmp->checksum = 0;
	icmp->rest = bpf_htonl(mtu < IPV4_MIN_MTU ? IPV4_MIN_MTU : mtu & 0xffff);
	__s64 sum = csum_add(icmp, CSUM_CHUNK, 0);
	sum = csum_add((void *)icmp + CSUM_CHUNK, sizeof(*icmp) + ICMP4_QUOTE - CSUM_CHUNK, sum);
	icmp->checksum = csum_fold(sum);
	return COUNTER_ICMP_TOO_BIG;
}

/* too_big6 builds the ICMPv6 "packet too big" answer in the frame; its
 * checksum covers the pseudo-header (RFC 4443 2.3). */
static __always_inline __u32 too_big6(struct xdp_md *ctx, __u32 l3_off, __u32 mtu)
{
	void *data = make_room(ctx, l3_off, IPV6_HLEN + sizeof(struct icmp_hdr), ICMP6_QUOTE);
	if (!data)
		return COUNTER_DROP_TOO_BIG;
	struct ipv6hdr *ip6 = data + l3_off;
	struct icmp_hdr *icmp = (void *)(ip6 + 1);
	struct ipv6hdr *quoted = (void *)(icmp + 1);
	if ((void *)(quoted + 1) > (void *)(long)ctx->data_end ||
	    (void *)icmp + sizeof(*icmp) + ICMP6_QUOTE > (void *)(long)ctx->data_end)
		return COUNTER_DROP_TOO_BIG;
	reply_l2(data);
	__u32 len = sizeof(*icmp) + ICMP6_QUOTE;
	*(__be32 *)ip6 = bpf_htonl(0x60000000);
	ip6->payload_len = bpf_htons(len);
	ip6->nexthdr = PROTO_ICMPV6;
	ip6->hop_limit = OUTER_TTL;
	ip6->saddr = quoted->daddr;
	ip6->daddr = quoted->saddr;
	icmp->type = ICMPV6_PKT_TOOBIG;
	icmp->code = 0;
	icmp->checksum = 0;
	icmp->rest = bpf_htonl(mtu < IPV6_MIN_MTU ? IPV6_MIN_MTU : mtu);
	__be32 pseudo[2] = {bpf_htonl(len), bpf_htonl(PROTO_ICMPV6)};
	__s64 sum = csum_add(&ip6->saddr, 32, 0);
	sum = csum_add(pseudo, sizeof(pseudo), sum);
	sum = csum_add(icmp, CSUM_CHUNK, sum);
	sum = csum_add((void *)icmp + CSUM_CHUNK, CSUM_CHUNK, sum);
	sum = csum_add((void *)icmp + 2 * CSUM_CHUNK, len - 2 * CSUM_CHUNK, sum);
	icmp->checksum = csum_fold(sum);
	return COUNTER_ICMP_TOO_BIG;
}

/* answer_too_big answers a client packet that would exceed the egress
 * MTU (the FIB's mtu_result) once overhead bytes of outer headers are
 * pushed, or says why not (COUNTER_DROP_TOO_BIG). */
static __always_inline __u32 answer_too_big(struct xdp_md *ctx, const struct packet *p,
					    __u32 egress_mtu, __u32 overhead)
{
	__u32 quote = p->family == 4 ? ICMP4_QUOTE : ICMP6_QUOTE;
	if (p->icmp || p->l3_len < quote || egress_mtu <= overhead || !too_big_admitted())
		return COUNTER_DROP_TOO_BIG;
	__u32 mtu = egress_mtu - overhead;
	int vlan = p->l3_off != ETH_HLEN;
	if (p->family == 4)
		return vlan ? too_big4(ctx, ETH_HLEN + VLAN_HLEN, mtu) : too_big4(ctx, ETH_HLEN, mtu);
	return vlan ? too_big6(ctx, ETH_HLEN + VLAN_HLEN, mtu) : too_big6(ctx, ETH_HLEN, mtu);
}

#endif
