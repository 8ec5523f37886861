/* forward.h: sending a packet to its backend, by IP-in-IP (or GUE, IP in
 * UDP) to the backend's next hop (the nexthops map, else the FIB) or by
 * MAC rewrite on the local segment. Each
 * returns the final counter reason: COUNTER_TX, COUNTER_REDIRECT or a
 * COUNTER_DROP_*. */
#ifndef L4LB_FORWARD_H
#define L4LB_FORWARD_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "encap.h"
#include "icmp_gen.h"
#include "maps.h"
#include "parse.h"
#include "rss.h"
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

/* outer_for fills the outer headers' per-flow parts for be: the source is
 * the flow's address in [xdp] source_prefix4/6 when one is set (rss.h),
 * else the balancer's own; GUE adds its UDP ports. The flow hash is taken
 * only when something uses it. */
static __always_inline __u32 outer_for(struct outer *o, const struct packet *p,
				       const struct backend *be, const struct lb_config *cfg, int gue)
{
	__u64 h = 0;

	if (gue || cfg->encap_flags)
		h = encap_hash(&p->flow);
	if (gue)
		gue_ports(o, cfg, h);
	if (be->family == 4) {
		if (cfg->encap_flags & ENCAP_PREFIX4)
			return prefix_source4(o, cfg, h);
		if (is_zero(cfg->src4, 4))
			return COUNTER_DROP_NO_SOURCE;
		__builtin_memcpy(o->src, cfg->src4, 4);
		return COUNTER_NONE;
	}
	if (cfg->encap_flags & ENCAP_PREFIX6)
		return prefix_source6(o, cfg, h);
	if (is_zero(cfg->src6, 16))
		return COUNTER_DROP_NO_SOURCE;
	__builtin_memcpy(o->src, cfg->src6, 16);
	return COUNTER_NONE;
}

/* fib_route asks the kernel for the next hop of the encapsulated packet,
 * before any byte moves: tot_len is the outer packet's size, so an egress
 * MTU it exceeds comes back as FRAG_NEEDED. */
static __always_inline __u32 fib_route(struct xdp_md *ctx, const struct packet *p,
				       const struct backend *be, const struct outer *o,
				       struct bpf_fib_lookup *fib)
{
	fib->ifindex = ctx->ingress_ifindex;
	fib->l4_protocol = o->extra ? PROTO_UDP : inner_proto(p);
	if (be->family == 4) {
		fib->family = AF_INET;
		fib->tos = p->tos;
		fib->tot_len = p->l3_len + IPV4_HLEN + o->extra;
		__builtin_memcpy(&fib->ipv4_src, o->src, 4);
		__builtin_memcpy(&fib->ipv4_dst, be->addr + 12, 4);
	} else {
		fib->family = AF_INET6;
		fib->tot_len = p->l3_len + IPV6_HLEN + o->extra;
		__builtin_memcpy(fib->ipv6_src, o->src, 16);
		__builtin_memcpy(fib->ipv6_dst, be->addr, 16);
	}
	return fib_reason(bpf_fib_lookup(ctx, fib, sizeof(*fib), 0));
}

/* fib_out gives the frame at eth the FIB's MACs and sends it where the
 * FIB says: back out of the ingress interface (XDP_TX) or to another. */
static __always_inline __u32 fib_out(struct xdp_md *ctx, struct ethhdr *eth,
				     const struct bpf_fib_lookup *fib)
{
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	if (fib->ifindex == ctx->ingress_ifindex)
		return COUNTER_TX;
	bpf_redirect(fib->ifindex, 0);
	return COUNTER_REDIRECT;
}

/* encap pushes the outer header for be's family, with constant offsets in
 * each branch so the verifier sees fixed packet ranges. */
static __always_inline void *encap(struct xdp_md *ctx, const struct packet *p,
				   const struct backend *be, const struct outer *o)
{
	int vlan = p->l3_off != ETH_HLEN;
	if (o->extra)
		return encap_gue(ctx, p, be, o);
	if (be->family == 4)
		return vlan ? encap4(ctx, p, o->src, be->addr + 12, ETH_HLEN + VLAN_HLEN)
			    : encap4(ctx, p, o->src, be->addr + 12, ETH_HLEN);
	return vlan ? encap6(ctx, p, o->src, be->addr, ETH_HLEN + VLAN_HLEN)
		    : encap6(ctx, p, o->src, be->addr, ETH_HLEN);
}

/* outer_len is what the outer headers add for be. */
static __always_inline __u32 outer_len(const struct backend *be, const struct outer *o)
{
	return (be->family == 4 ? IPV4_HLEN : IPV6_HLEN) + o->extra;
}

/* next_hop fills fib's MACs, egress and MTU from backend idx's nexthops
 * entry, checking the outer size as bpf_fib_lookup would (FRAG_NEEDED ->
 * COUNTER_DROP_TOO_BIG), or asks bpf_fib_lookup when the entry is not
 * valid (counted in nexthop_fib). */
static __always_inline __u32 next_hop(struct xdp_md *ctx, const struct packet *p,
				      const struct backend *be, __u32 idx, const struct outer *o,
				      struct bpf_fib_lookup *fib)
{
	struct nexthop *nh = bpf_map_lookup_elem(&nexthops, &idx);
	if (nh && nh->valid) {
		fib->mtu_result = nh->mtu;
		if (p->l3_len + outer_len(be, o) > nh->mtu)
			return COUNTER_DROP_TOO_BIG;
		__builtin_memcpy(fib->dmac, nh->dmac, ETH_ALEN);
		__builtin_memcpy(fib->smac, nh->smac, ETH_ALEN);
		fib->ifindex = nh->ifindex;
		return COUNTER_NONE;
	}
	struct lb_counters *c = global_counters();
	if (c)
		c->nexthop_fib++;
	return fib_route(ctx, p, be, o, fib);
}

/* forward_ipip encapsulates towards backend idx (in IP, or with gue in
 * UDP) and sends it to its next hop (next_hop): back out of the ingress
 * interface (XDP_TX) or to another one. */
static __always_inline __u32 forward_ipip(struct xdp_md *ctx, const struct packet *p,
					  const struct backend *be, __u32 idx, int gue)
{
	__u32 zero = 0;
	struct lb_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct bpf_fib_lookup fib = {};
	struct outer o = {};

	if (!cfg)
		return COUNTER_DROP_NO_SOURCE;
	__u32 r = outer_for(&o, p, be, cfg, gue);
	if (r != COUNTER_NONE)
		return r;
	r = next_hop(ctx, p, be, idx, &o, &fib);
	if (r == COUNTER_DROP_TOO_BIG)
		return answer_too_big(ctx, p, fib.mtu_result, outer_len(be, &o));
	if (r != COUNTER_NONE)
		return r;
	struct ethhdr *eth = encap(ctx, p, be, &o);
	if (!eth)
		return COUNTER_DROP_ENCAP;
	return fib_out(ctx, eth, &fib);
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
