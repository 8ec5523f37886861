/* encap.h: pushing the outer IPv4/IPv6 header of IP-in-IP forwarding. The
 * L2 header (with its VLAN tag, if any) moves to the new front; the inner
 * packet is not touched. Every packet pointer is re-derived after
 * bpf_xdp_adjust_head: the old ones are invalid. */
#ifndef L4LB_ENCAP_H
#define L4LB_ENCAP_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "csum.h"
#include "parse.h"

/* inner_proto is the outer header's protocol for the packet it carries. */
static __always_inline __u8 inner_proto(const struct packet *p)
{
	return p->family == 4 ? PROTO_IPIP : PROTO_IPV6;
}

/* push_l2 makes room for hdr_len bytes and moves the l3_off bytes of L2
 * header to the new front. It returns the new data pointer, or NULL. Both
 * sizes are constants at every call site, so the copy is unrolled. */
static __always_inline void *push_l2(struct xdp_md *ctx, __u32 hdr_len, __u32 l3_off)
{
	if (bpf_xdp_adjust_head(ctx, -(int)hdr_len))
		return NULL;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + hdr_len + l3_off > data_end)
		return NULL;
	__builtin_memcpy(data, data + hdr_len, l3_off);
	/* The ethertype (of the tag, if any) now names the outer header. */
	return data;
}

/* write_outer4 fills the outer IPv4 header: no options, id 0, no DF (the
 * inner packet's own DF and PMTU discovery govern), TTL 64. proto is what
 * follows it, extra the bytes between it and the inner packet (GUE's UDP
 * header, else 0). */
static __always_inline void write_outer4(struct iphdr *ip, const struct packet *p,
					 const __u8 *src, const __u8 *dst, __u8 proto, __u32 extra)
{
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = p->tos;
	ip->tot_len = bpf_htons(p->l3_len + IPV4_HLEN + extra);
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = OUTER_TTL;
	ip->protocol = proto;
	ip->check = 0;
	__builtin_memcpy(&ip->saddr, src, 4);
	__builtin_memcpy(&ip->daddr, dst, 4);
	ip->check = ipv4_csum(ip);
}

/* write_outer6 fills the outer IPv6 header: traffic class copied, flow
 * label 0, hop limit 64; proto and extra as for write_outer4. */
static __always_inline void write_outer6(struct ipv6hdr *ip6, const struct packet *p,
					 const __u8 *src, const __u8 *dst, __u8 proto, __u32 extra)
{
	ip6->version = 6;
	ip6->priority = p->tos >> 4;
	ip6->flow_lbl[0] = (p->tos & 0xf) << 4;
	ip6->flow_lbl[1] = 0;
	ip6->flow_lbl[2] = 0;
	ip6->payload_len = bpf_htons(p->l3_len + extra);
	ip6->nexthdr = proto;
	ip6->hop_limit = OUTER_TTL;
	__builtin_memcpy(&ip6->saddr, src, 16);
	__builtin_memcpy(&ip6->daddr, dst, 16);
}

/* encap4 pushes an outer IPv4 header src -> dst; l3_off is a constant. */
static __always_inline void *encap4(struct xdp_md *ctx, const struct packet *p,
				    const __u8 *src, const __u8 *dst, __u32 l3_off)
{
	void *data = push_l2(ctx, IPV4_HLEN, l3_off);
	if (!data)
		return NULL;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + l3_off;
	if ((void *)(ip + 1) > data_end)
		return NULL;
	*((__be16 *)ip - 1) = bpf_htons(ETH_P_IP);
	write_outer4(ip, p, src, dst, inner_proto(p), 0);
	return data;
}

/* encap6 pushes an outer IPv6 header src -> dst; l3_off is a constant. */
static __always_inline void *encap6(struct xdp_md *ctx, const struct packet *p,
				    const __u8 *src, const __u8 *dst, __u32 l3_off)
{
	void *data = push_l2(ctx, IPV6_HLEN, l3_off);
	if (!data)
		return NULL;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + l3_off;
	if ((void *)(ip6 + 1) > data_end)
		return NULL;
	*((__be16 *)ip6 - 1) = bpf_htons(ETH_P_IPV6);
	write_outer6(ip6, p, src, dst, inner_proto(p), 0);
	return data;
}

#endif
