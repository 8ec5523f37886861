//go:build ignore

/* hcenc.c: tc_hc_encap, on the egress of l4lb's probe device. A health
 * probe of an xdp VIP connects to the VIP with a socket mark; a policy
 * rule routes marked packets into the probe device, where this program
 * looks the mark up in hc_targets and sends the packet out of the XDP
 * interface the way the VIP's client packets leave the balancer:
 *
 *   mark / frame                  verdict         change                        counter
 *   ----------------------------  --------------  ----------------------------  -------------
 *   target ipip, IPv4 backend     TC_ACT_REDIRECT outer IPv4 src -> dst pushed  sent_ipip4
 *   target ipip, IPv6 backend     TC_ACT_REDIRECT outer IPv6 src -> dst pushed  sent_ipip6
 *   target l2                     TC_ACT_REDIRECT none (MACs from dst's neigh)  sent_l2
 *   no target for the mark        TC_ACT_SHOT     none                          drop_no_target
 *   neither IPv4 nor IPv6         TC_ACT_SHOT     none                          drop_not_ip
 *   bpf_skb_adjust_room failed    TC_ACT_SHOT     none                          drop_encap
 *
 * The outer header is the one xdp_lb writes (encap.h: no options, id 0, no
 * DF, TTL 64, the inner traffic class). The redirect is
 * bpf_redirect_neigh: the kernel routes the outer destination (ipip) or
 * takes dst as the next hop (l2) and fills in both MACs from its
 * neighbour table, resolving it if need be. The mark is cleared first, so
 * that the route lookup of the encapsulated packet is not the probe's. */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "csum.h"
#include "hcenc.h"

char LICENSE[] SEC("license") = "GPL";

#define HC_AF_INET 2
#define HC_AF_INET6 10
#define HC_MAX_TARGETS 65536

/* Probe targets by socket mark; written by Go (bpf.ProbeEncap). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HC_MAX_TARGETS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct hc_target);
} hc_targets SEC(".maps");

/* Counters, indexed by enum hc_counter (per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HC_MAX);
	__type(key, __u32);
	__type(value, __u64);
} hc_counters SEC(".maps");

/* Anchors so that the enums reach BTF, where bpf2go finds them. */
volatile const enum hc_counter anchor_hc_counter;
volatile const enum hc_forward anchor_hc_forward;

/* verdict counts c and returns v. */
static __always_inline int verdict(__u32 c, int v)
{
	__u64 *n = bpf_map_lookup_elem(&hc_counters, &c);
	if (n)
		*n += 1;
	return v;
}

/* v4mapped reports whether a 16-byte address is an IPv4 one. */
static __always_inline int v4mapped(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;
	return w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0xffff);
}

/* inner_tos reads the inner packet's TOS / traffic class (0 if unreadable). */
static __always_inline __u8 inner_tos(struct __sk_buff *skb, int v4)
{
	__u8 b[2] = {};
	if (bpf_skb_load_bytes(skb, ETH_HLEN, b, 2))
		return 0;
	return v4 ? b[1] : (__u8)((b[0] << 4) | (b[1] >> 4));
}

/* push makes room for hdr_len bytes behind the Ethernet header, writes hdr
 * there and names it in the ethertype. */
static __always_inline int push(struct __sk_buff *skb, void *hdr, __u32 hdr_len, __u64 flags, __u16 ethertype)
{
	__be16 proto = bpf_htons(ethertype);

	if (bpf_skb_adjust_room(skb, hdr_len, BPF_ADJ_ROOM_MAC, flags))
		return -1;
	if (bpf_skb_store_bytes(skb, ETH_HLEN, hdr, hdr_len, 0))
		return -1;
	return bpf_skb_store_bytes(skb, ETH_HLEN - 2, &proto, 2, 0);
}

/* encap4 pushes an outer IPv4 header t->src -> t->dst. */
static __always_inline int encap4(struct __sk_buff *skb, const struct hc_target *t, __u8 proto, __u8 tos)
{
	struct iphdr ip = {
		.version = 4,
		.ihl = 5,
		.tos = tos,
		.tot_len = bpf_htons(skb->len - ETH_HLEN + IPV4_HLEN),
		.ttl = OUTER_TTL,
		.protocol = proto,
	};
	__builtin_memcpy(&ip.saddr, t->src + 12, 4);
	__builtin_memcpy(&ip.daddr, t->dst + 12, 4);
	ip.check = ipv4_csum(&ip);
	return push(skb, &ip, IPV4_HLEN, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4, ETH_P_IP);
}

/* encap6 pushes an outer IPv6 header t->src -> t->dst. */
static __always_inline int encap6(struct __sk_buff *skb, const struct hc_target *t, __u8 proto, __u8 tos)
{
	struct ipv6hdr ip6 = {
		.version = 6,
		.priority = tos >> 4,
		.flow_lbl = {(tos & 0xf) << 4, 0, 0},
		.payload_len = bpf_htons(skb->len - ETH_HLEN),
		.nexthdr = proto,
		.hop_limit = OUTER_TTL,
	};
	__builtin_memcpy(&ip6.saddr, t->src, 16);
	__builtin_memcpy(&ip6.daddr, t->dst, 16);
	return push(skb, &ip6, IPV6_HLEN, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6, ETH_P_IPV6);
}

/* to_l2 sends the packet unchanged to the backend's MAC. */
static __always_inline int to_l2(const struct hc_target *t)
{
	struct bpf_redir_neigh nh = {};

	if (v4mapped(t->dst)) {
		nh.nh_family = HC_AF_INET;
		__builtin_memcpy(&nh.ipv4_nh, t->dst + 12, 4);
	} else {
		nh.nh_family = HC_AF_INET6;
		__builtin_memcpy(nh.ipv6_nh, t->dst, 16);
	}
	return verdict(HC_SENT_L2, bpf_redirect_neigh(t->ifindex, &nh, sizeof(nh), 0));
}

SEC("tc")
int tc_hc_encap(struct __sk_buff *skb)
{
	__u32 mark = skb->mark;
	struct hc_target *t = bpf_map_lookup_elem(&hc_targets, &mark);
	int v4;

	if (!t)
		return verdict(HC_DROP_NO_TARGET, TC_ACT_SHOT);
	if (skb->protocol == bpf_htons(ETH_P_IP))
		v4 = 1;
	else if (skb->protocol == bpf_htons(ETH_P_IPV6))
		v4 = 0;
	else
		return verdict(HC_DROP_NOT_IP, TC_ACT_SHOT);
	skb->mark = 0;
	if (t->forward == HC_FORWARD_L2)
		return to_l2(t);

	__u8 proto = v4 ? PROTO_IPIP : PROTO_IPV6;
	__u8 tos = inner_tos(skb, v4);
	if (v4mapped(t->dst)) {
		if (encap4(skb, t, proto, tos))
			return verdict(HC_DROP_ENCAP, TC_ACT_SHOT);
		return verdict(HC_SENT_IPIP4, bpf_redirect_neigh(t->ifindex, NULL, 0, 0));
	}
	if (encap6(skb, t, proto, tos))
		return verdict(HC_DROP_ENCAP, TC_ACT_SHOT);
	return verdict(HC_SENT_IPIP6, bpf_redirect_neigh(t->ifindex, NULL, 0, 0));
}
