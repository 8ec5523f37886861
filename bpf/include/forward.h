/* forward.h: sending a packet to its backend, by IP-in-IP through the FIB
 * or by MAC rewrite on the local segment. Each returns the final counter
 * reason: COUNTER_TX, COUNTER_REDIRECT or a COUNTER_DROP_*. */
#ifndef L4LB_FORWARD_H
#define L4LB_FORWARD_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "encap.h"
#include "maps.h"
#include "parse.h"
#include "stats.h"

#define AF_INET 2
#define AF_INET6 10

/* is_zero says whether n bytes at b are all zero (an unset address). */
static __always_inline int is_zero(const __u8 *b, int n)
{
	__u8 acc = 0;
#pragma unroll
	for (int i = 0; i < n; i++)
		acc |= b[i];
	return acc == 0;
}

/* fib_reason maps a bpf_fib_lookup result onto a counter. */
static __always_inline __u32 fib_reason(long rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		return COUNTER_NONE;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return COUNTER_DROP_NO_NEIGH;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return COUNTER_DROP_TOO_BIG;
	}
	return COUNTER_DROP_FIB;
}

/* fib_route asks the kernel for the next hop of the encapsulated packet,
 * before any byte moves: tot_len is the outer packet's size, so an egress
 * MTU it exceeds comes back as FRAG_NEEDED. */
static __always_inline __u32 fib_route(struct xdp_md *ctx, const struct packet *p,
				       const struct backend *be, const struct lb_config *cfg,
				       struct bpf_fib_lookup *fib)
{
	fib->ifindex = ctx->ingress_ifindex;
	fib->l4_protocol = inner_proto(p);
	if (be->family == 4) {
		if (is_zero(cfg->src4, 4))
			return COUNTER_DROP_NO_SOURCE;
		fib->family = AF_INET;
		fib->tos = p->tos;
		fib->tot_len = p->l3_len + IPV4_HLEN;
		__builtin_memcpy(&fib->ipv4_src, cfg->src4, 4);
		__builtin_memcpy(&fib->ipv4_dst, be->addr + 12, 4);
	} else {
		if (is_zero(cfg->src6, 16))
			return COUNTER_DROP_NO_SOURCE;
		fib->family = AF_INET6;
		fib->tot_len = p->l3_len + IPV6_HLEN;
		__builtin_memcpy(fib->ipv6_src, cfg->src6, 16);
		__builtin_memcpy(fib->ipv6_dst, be->addr, 16);
	}
	return fib_reason(bpf_fib_lookup(ctx, fib, sizeof(*fib), 0));
}

/* encap pushes the outer header for be's family (src: 4 bytes for IPv4,
 * 16 for IPv6), with constant offsets in each branch so the verifier sees
 * fixed packet ranges. */
static __always_inline void *encap(struct xdp_md *ctx, const struct packet *p,
				   const struct backend *be, const __u8 *src)
{
	int vlan = p->l3_off != ETH_HLEN;
	if (be->family == 4)
		return vlan ? encap4(ctx, p, src, be->addr + 12, ETH_HLEN + VLAN_HLEN)
			    : encap4(ctx, p, src, be->addr + 12, ETH_HLEN);
	return vlan ? encap6(ctx, p, src, be->addr, ETH_HLEN + VLAN_HLEN)
		    : encap6(ctx, p, src, be->addr, ETH_HLEN);
}

/* send_ipip encapsulates towards be from src and sends the frame to the
 * next hop dmac out of ifindex: back out of the ingress interface
 * (XDP_TX) or to another one. */
static __always_inline __u32 send_ipip(struct xdp_md *ctx, const struct packet *p,
				       const struct backend *be, const __u8 *src,
				       const __u8 *dmac, const __u8 *smac, __u32 ifindex)
{
	struct ethhdr *eth = encap(ctx, p, be, src);
	if (!eth)
		return COUNTER_DROP_ENCAP;
	__builtin_memcpy(eth->h_dest, dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, smac, ETH_ALEN);
	if (ifindex == ctx->ingress_ifindex)
		return COUNTER_TX;
	bpf_redirect(ifindex, 0);
	return COUNTER_REDIRECT;
}

/* forward_fib sends towards be where bpf_fib_lookup says (no valid
 * nexthops entry), counted in nexthop_fib. */
static __always_inline __u32 forward_fib(struct xdp_md *ctx, const struct packet *p,
					 const struct backend *be)
{
	__u32 zero = 0;
	struct lb_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct lb_counters *c = global_counters();
	struct bpf_fib_lookup fib = {};

	if (c)
		c->nexthop_fib++;
	if (!cfg)
		return COUNTER_DROP_NO_SOURCE;
	__u32 r = fib_route(ctx, p, be, cfg, &fib);
	if (r != COUNTER_NONE)
		return r;
	const __u8 *src = be->family == 4 ? cfg->src4 : cfg->src6;
	return send_ipip(ctx, p, be, src, fib.dmac, fib.smac, fib.ifindex);
}

/* forward_ipip encapsulates towards backend idx through its nexthops
 * entry, checking the path MTU as bpf_fib_lookup would (tot_len = the
 * outer packet), or through the FIB when the entry is not valid. */
static __always_inline __u32 forward_ipip(struct xdp_md *ctx, const struct packet *p,
					  const struct backend *be, __u32 idx)
{
	struct nexthop *nh = bpf_map_lookup_elem(&nexthops, &idx);
	if (!nh || !nh->valid)
		return forward_fib(ctx, p, be);
	__u32 outer = p->l3_len + (be->family == 4 ? IPV4_HLEN : IPV6_HLEN);
	if (outer > nh->mtu)
		return COUNTER_DROP_TOO_BIG;
	const __u8 *src = be->family == 4 ? nh->src + 12 : nh->src;
	return send_ipip(ctx, p, be, src, nh->dmac, nh->smac, nh->ifindex);
}

/* forward_l2 hands the frame to a backend on this segment: destination MAC
 * = the backend's, source = the frame's old destination (ours). */
static __always_inline __u32 forward_l2(struct xdp_md *ctx, const struct backend *be)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return COUNTER_DROP_ENCAP;
	if (is_zero(be->mac, ETH_ALEN))
		return COUNTER_DROP_NO_NEIGH;
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, be->mac, ETH_ALEN);
	return COUNTER_TX;
}

#endif
