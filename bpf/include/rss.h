/* rss.h: encapsulation that spreads over a backend's receive queues. NICs
 * hash IP-in-IP on its outer addresses only, so one fixed outer source puts
 * every packet from a balancer on one queue of each backend. With [xdp]
 * source_prefix4/6 the outer source of a flow is an address of the prefix
 * chosen by the flow's hash (Katran's IPIP_V4_PREFIX idea); forward = gue
 * (IP in UDP, GUE variant 1: the inner IP header right after the UDP
 * header, as Katran and the kernel's fou "gue" direct mode) adds a
 * per-flow UDP source port, which NICs hash like any UDP flow. A flow's
 * packets always get the same source and port: one flow, one queue, in
 * order. Nothing here runs for a VIP that uses neither. */
#ifndef L4LB_RSS_H
#define L4LB_RSS_H

#include <linux/udp.h>
#include "encap.h"

#define UDP_HLEN 8

/* GUE source ports come from the dynamic range 49152-65535 (RFC 6335), as
 * RFC 8086 asks of UDP tunnels that carry a flow's entropy in the port. */
#define GUE_SPORT_BASE 0xc000
#define GUE_SPORT_MASK 0x3fff

/* The per-flow parts of the outer headers. */
struct outer {
	__u8 src[16];	/* source address (IPv4: the first 4 bytes) */
	__be16 sport;	/* GUE: UDP source port */
	__be16 dport;	/* GUE: UDP destination port ([xdp] gue_port) */
	__u32 extra;	/* bytes between the outer IP header and the inner packet: 0 or UDP_HLEN */
};

/* encap_hash mixes the flow (client address and port, VIP port and low
 * word, protocol) into 64 bits. Not the Maglev hash: it only has to
 * spread flows over sources and ports, in two multiplies. */
static __always_inline __u64 encap_hash(const struct flow_key *f)
{
	__u64 a, b;
	__u32 v;

	__builtin_memcpy(&a, f->client, 8);
	__builtin_memcpy(&b, f->client + 8, 8);
	__builtin_memcpy(&v, f->vip + 12, 4);
	__u64 h = a ^ b ^ ((__u64)v << 16) ^ ((__u64)f->client_port << 48) ^
		  ((__u64)f->vip_port << 32) ^ f->proto;
	h *= HASH_GOLDEN;
	h ^= h >> 32;
	h *= LANE_MIX;
	return h ^ (h >> 29);
}

/* prefix_source4 sets the flow's IPv4 source in [xdp] source_prefix4. */
static __always_inline __u32 prefix_source4(struct outer *o, const struct lb_config *cfg, __u64 h)
{
	__u32 pfx, mask;

	__builtin_memcpy(&pfx, cfg->prefix4, 4);
	__builtin_memcpy(&mask, cfg->mask4, 4);
	pfx |= (__u32)h & mask;
	__builtin_memcpy(o->src, &pfx, 4);
	return COUNTER_NONE;
}

/* prefix_source6 sets the flow's IPv6 source in [xdp] source_prefix6
 * (host bits only in the low 64). */
static __always_inline __u32 prefix_source6(struct outer *o, const struct lb_config *cfg, __u64 h)
{
	__u64 lo, mask;

	__builtin_memcpy(o->src, cfg->prefix6, 8);
	__builtin_memcpy(&lo, cfg->prefix6 + 8, 8);
	__builtin_memcpy(&mask, cfg->mask6, 8);
	lo |= h & mask;
	__builtin_memcpy(o->src + 8, &lo, 8);
	return COUNTER_NONE;
}

/* gue_ports sets GUE's UDP ports: the source from the hash's top bits (the
 * address took the low ones), the destination [xdp] gue_port. */
static __always_inline void gue_ports(struct outer *o, const struct lb_config *cfg, __u64 h)
{
	o->sport = bpf_htons(GUE_SPORT_BASE | ((h >> 48) & GUE_SPORT_MASK));
	o->dport = cfg->gue_port;
	o->extra = UDP_HLEN;
}

/* write_udp fills GUE's UDP header. The checksum is 0: allowed over IPv4
 * (RFC 768) and for tunnels over IPv6 (RFC 6935, 6936; the kernel's fou
 * and l4lb's decap accept it); the inner packet keeps its own checksum. */
static __always_inline void write_udp(struct udphdr *udp, const struct packet *p,
				      const struct outer *o)
{
	udp->source = o->sport;
	udp->dest = o->dport;
	udp->len = bpf_htons(p->l3_len + UDP_HLEN);
	udp->check = 0;
}

/* gue4 pushes outer IPv4 + UDP headers towards dst; l3_off is a constant. */
static __always_inline void *gue4(struct xdp_md *ctx, const struct packet *p,
				  const struct outer *o, const __u8 *dst, __u32 l3_off)
{
	void *data = push_l2(ctx, IPV4_HLEN + UDP_HLEN, l3_off);
	if (!data)
		return NULL;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + l3_off;
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > data_end)
		return NULL;
	*((__be16 *)ip - 1) = bpf_htons(ETH_P_IP);
	write_outer4(ip, p, o->src, dst, PROTO_UDP, UDP_HLEN);
	write_udp(udp, p, o);
	return data;
}

/* gue6 pushes outer IPv6 + UDP headers towards dst; l3_off is a constant. */
static __always_inline void *gue6(struct xdp_md *ctx, const struct packet *p,
				  const struct outer *o, const __u8 *dst, __u32 l3_off)
{
	void *data = push_l2(ctx, IPV6_HLEN + UDP_HLEN, l3_off);
	if (!data)
		return NULL;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + l3_off;
	struct udphdr *udp = (void *)(ip6 + 1);
	if ((void *)(udp + 1) > data_end)
		return NULL;
	*((__be16 *)ip6 - 1) = bpf_htons(ETH_P_IPV6);
	write_outer6(ip6, p, o->src, dst, PROTO_UDP, UDP_HLEN);
	write_udp(udp, p, o);
	return data;
}

/* encap_gue pushes GUE's headers for be's family, with constant offsets in
 * each branch (as forward.h's encap). */
static __always_inline void *encap_gue(struct xdp_md *ctx, const struct packet *p,
				       const struct backend *be, const struct outer *o)
{
	int vlan = p->l3_off != ETH_HLEN;
	if (be->family == 4)
		return vlan ? gue4(ctx, p, o, be->addr + 12, ETH_HLEN + VLAN_HLEN)
			    : gue4(ctx, p, o, be->addr + 12, ETH_HLEN);
	return vlan ? gue6(ctx, p, o, be->addr, ETH_HLEN + VLAN_HLEN)
		    : gue6(ctx, p, o, be->addr, ETH_HLEN);
}

#endif
