//go:build ignore

/* decap.c: xdp_decap, run on backends. It strips the outer header the
 * balancer pushed and passes the inner packet to the stack. Verdicts:
 *
 *   frame                                          verdict   change   counter
 *   ---------------------------------------------  --------  -------  --------------------
 *   outer IPv4, proto 4 or 41, no options/frags    XDP_PASS  strip 20 outer_v4
 *   outer IPv6, nexthdr 41 or 4                    XDP_PASS  strip 40 outer_v6
 *   outer IPv4, UDP to the GUE port, inner IP      XDP_PASS  strip 28 gue_v4
 *   outer IPv6, UDP to the GUE port, inner IP      XDP_PASS  strip 48 gue_v6
 *   outer IPv4 options/fragment, truncated, bad
 *     length (IP or UDP), inner header missing     XDP_PASS  none     pass_malformed
 *   anything else                                  XDP_PASS  none     pass_not_encap
 *   bpf_xdp_adjust_head failed                     XDP_PASS  none     failed
 *
 * Any IP-in-IP packet is decapsulated, whatever its outer destination: the
 * stack then delivers or drops the inner packet by its own address, as an
 * "external" ipip device would. GUE (forward = "gue") is IP in UDP to the
 * port in decap_config (0: none), variant 1: the inner IP header right
 * after the UDP header, as the kernel's fou "gue" mode takes it; the UDP
 * checksum is not checked (the balancer sends 0; the inner packet has its
 * own), and a UDP payload that is not IPv4/IPv6 (GUE variant 0) passes. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "parse.h"
#include "structs.h"

char LICENSE[] SEC("license") = "GPL";

/* Decap counters, indexed by enum decap_counter (per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DECAP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} decap_counters SEC(".maps");

/* The GUE port (one entry, written by Go at attach). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct decap_config);
} decap_config SEC(".maps");

/* Anchor so that the enum reaches BTF, where bpf2go finds it. */
volatile const enum decap_counter anchor_decap_counter;

/* outer describes the header to strip. */
struct outer {
	__u32 hdr_len;		/* 20 or 40; GUE: 28 or 48 */
	__u8 inner;		/* 4 or 6 */
};

#define UDP_HLEN 8

/* gue_port is the configured GUE port (network order), 0 for none. */
static __always_inline __be16 gue_port(void)
{
	__u32 zero = 0;
	struct decap_config *c = bpf_map_lookup_elem(&decap_config, &zero);
	return c ? c->gue_port : 0;
}

/* check_gue accepts a UDP header to the GUE port whose length is the
 * outer payload's (payload_len), followed by an inner IPv4/IPv6 header's
 * first byte. It sets o->inner; hdr_len is the caller's. */
static __always_inline __u32 check_gue(struct udphdr *udp, void *data_end, __u32 payload_len,
				       struct outer *o)
{
	__be16 port = gue_port();
	if ((void *)(udp + 1) > data_end)
		return DECAP_PASS_NOT_ENCAP;
	if (!port || udp->dest != port)
		return DECAP_PASS_NOT_ENCAP;
	if (bpf_ntohs(udp->len) != payload_len || payload_len < UDP_HLEN + IPV4_HLEN)
		return DECAP_PASS_MALFORMED;
	__u8 *first = (void *)(udp + 1);
	if ((void *)(first + 1) > data_end)
		return DECAP_PASS_MALFORMED;
	__u8 version = *first >> 4;
	if (version != 4 && version != 6)
		return DECAP_PASS_NOT_ENCAP;
	o->inner = version;
	return DECAP_NONE;
}

/* check_gue4 accepts GUE in an option-less, unfragmented IPv4 packet. A
 * later fragment carries no UDP header: it passes as not encapsulated. */
static __always_inline __u32 check_gue4(struct iphdr *ip, void *data_end, struct outer *o)
{
	if (ip->ihl != 5 || (ip->frag_off & bpf_htons(IP_OFFSET)))
		return DECAP_PASS_NOT_ENCAP;
	__u32 r = check_gue((void *)(ip + 1), data_end, bpf_ntohs(ip->tot_len) - IPV4_HLEN, o);
	if (r != DECAP_NONE)
		return r;
	if (check_ipv4(ip, data_end) != COUNTER_NONE)
		return DECAP_PASS_MALFORMED;
	o->hdr_len = IPV4_HLEN + UDP_HLEN;
	return DECAP_NONE;
}

/* check_gue6 accepts GUE right after an IPv6 header. */
static __always_inline __u32 check_gue6(struct ipv6hdr *ip6, void *data_end, struct outer *o)
{
	__u32 r = check_gue((void *)(ip6 + 1), data_end, bpf_ntohs(ip6->payload_len), o);
	if (r != DECAP_NONE)
		return r;
	if (check_ipv6(ip6, data_end) != COUNTER_NONE)
		return DECAP_PASS_MALFORMED;
	o->hdr_len = IPV6_HLEN + UDP_HLEN;
	return DECAP_NONE;
}

/* inner_family maps an IP-in-IP protocol number onto the inner family. */
static __always_inline __u8 inner_family(__u8 proto)
{
	if (proto == PROTO_IPIP)
		return 4;
	if (proto == PROTO_IPV6)
		return 6;
	return 0;
}

/* check_outer4 accepts an outer IPv4 header that carries IP. */
static __always_inline __u32 check_outer4(struct iphdr *ip, void *data_end, struct outer *o)
{
	if ((void *)(ip + 1) > data_end)
		return DECAP_PASS_MALFORMED;
	if (ip->protocol == PROTO_UDP && ip->version == 4)
		return check_gue4(ip, data_end, o);
	o->inner = inner_family(ip->protocol);
	if (!o->inner || ip->version != 4)
		return DECAP_PASS_NOT_ENCAP;
	if (check_ipv4(ip, data_end) != COUNTER_NONE)
		return DECAP_PASS_MALFORMED;
	o->hdr_len = IPV4_HLEN;
	return DECAP_NONE;
}

/* check_outer6 accepts an outer IPv6 header that carries IP directly. */
static __always_inline __u32 check_outer6(struct ipv6hdr *ip6, void *data_end, struct outer *o)
{
	if ((void *)(ip6 + 1) > data_end)
		return DECAP_PASS_MALFORMED;
	if (ip6->nexthdr == PROTO_UDP && ip6->version == 6)
		return check_gue6(ip6, data_end, o);
	o->inner = inner_family(ip6->nexthdr);
	if (!o->inner || ip6->version != 6)
		return DECAP_PASS_NOT_ENCAP;
	if (check_ipv6(ip6, data_end) != COUNTER_NONE)
		return DECAP_PASS_MALFORMED;
	o->hdr_len = IPV6_HLEN;
	return DECAP_NONE;
}

/* check_inner makes sure a whole inner IP header follows the outer one. */
static __always_inline __u32 check_inner(void *inner, void *data_end, __u8 family)
{
	__u32 need = family == 4 ? IPV4_HLEN : IPV6_HLEN;
	if (inner + need > data_end)
		return DECAP_PASS_MALFORMED;
	__u8 version = *(__u8 *)inner >> 4;
	return version == family ? DECAP_NONE : DECAP_PASS_MALFORMED;
}

/* parse_outer finds the L2 length and the outer header to strip. */
static __always_inline __u32 parse_outer(struct xdp_md *ctx, __u32 *l3_off, struct outer *o)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 family = 0;
	__u32 r;

	if (parse_l2(data, data_end, l3_off, &family) != COUNTER_NONE)
		return DECAP_PASS_NOT_ENCAP;
	if (family == 4)
		r = check_outer4(data + *l3_off, data_end, o);
	else
		r = check_outer6(data + *l3_off, data_end, o);
	if (r != DECAP_NONE)
		return r;
	return check_inner(data + *l3_off + o->hdr_len, data_end, o->inner);
}

/* strip removes hdr_len bytes behind an L2 header of l3_off bytes (both
 * constants at the call site): the L2 header is saved, the head moves, and
 * the header is written back at the new front with the inner ethertype.
 * Nothing is written before adjust_head succeeds. */
static __always_inline __u32 strip(struct xdp_md *ctx, __u32 l3_off, __u32 hdr_len, __u8 inner)
{
	__u8 l2[ETH_HLEN + VLAN_HLEN];
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (data + l3_off > data_end)
		return DECAP_FAILED;
	__builtin_memcpy(l2, data, l3_off);
	if (bpf_xdp_adjust_head(ctx, hdr_len))
		return DECAP_FAILED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + l3_off > data_end)
		return DECAP_FAILED;
	__builtin_memcpy(data, l2, l3_off);
	*(__be16 *)(data + l3_off - 2) = bpf_htons(inner == 4 ? ETH_P_IP : ETH_P_IPV6);
	switch (hdr_len) {
	case IPV4_HLEN:
		return DECAP_OUTER_V4;
	case IPV6_HLEN:
		return DECAP_OUTER_V6;
	case IPV4_HLEN + UDP_HLEN:
		return DECAP_GUE_V4;
	}
	return DECAP_GUE_V6;
}

/* strip_hdr strips one of the four outer header sizes behind an L2
 * header of l3_off bytes (a constant at each call site). */
static __always_inline __u32 strip_hdr(struct xdp_md *ctx, __u32 l3_off, const struct outer *o)
{
	switch (o->hdr_len) {
	case IPV4_HLEN:
		return strip(ctx, l3_off, IPV4_HLEN, o->inner);
	case IPV6_HLEN:
		return strip(ctx, l3_off, IPV6_HLEN, o->inner);
	case IPV4_HLEN + UDP_HLEN:
		return strip(ctx, l3_off, IPV4_HLEN + UDP_HLEN, o->inner);
	}
	return strip(ctx, l3_off, IPV6_HLEN + UDP_HLEN, o->inner);
}

/* decap strips with constant sizes per branch for the verifier. */
static __always_inline __u32 decap(struct xdp_md *ctx, __u32 l3_off, const struct outer *o)
{
	if (l3_off == ETH_HLEN)
		return strip_hdr(ctx, ETH_HLEN, o);
	return strip_hdr(ctx, ETH_HLEN + VLAN_HLEN, o);
}

SEC("xdp")
int xdp_decap(struct xdp_md *ctx)
{
	struct outer o = {};
	__u32 l3_off = 0;
	__u32 r = parse_outer(ctx, &l3_off, &o);

	if (r == DECAP_NONE)
		r = decap(ctx, l3_off, &o);
	__u64 *c = bpf_map_lookup_elem(&decap_counters, &r);
	if (c)
		*c += 1;
	return XDP_PASS;
}
