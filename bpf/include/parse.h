/* parse.h: bounds-checked header parsing shared by both programs. Each step
 * returns COUNTER_NONE to go on, or the reason the packet passes untouched. */
#ifndef L4LB_PARSE_H
#define L4LB_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "structs.h"

/* The ICMP and ICMPv6 header: both are 8 bytes with the type first.
 * (linux/icmp.h drags in libc socket headers, which do not build for BPF.) */
struct icmp_hdr {
	__u8 type;
	__u8 code;
	__be16 checksum;
	__be32 rest;
};

/* The UAPI headers have no VLAN header. */
struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* What the balancer learned about a packet. */
struct packet {
	struct flow_key flow;	/* client -> VIP, also for ICMP (from the quote) */
	__u32 l3_off;		/* 14, or 18 with a VLAN tag */
	__u32 l3_len;		/* IP length of the whole packet (what gets encapsulated) */
	__u32 frame_len;	/* bytes as received */
	__u8 family;		/* 4 or 6: the received packet's IP version */
	__u8 tos;		/* IPv4 TOS / IPv6 traffic class, copied to the outer header */
	__u8 tcp_flags;		/* TCP flags byte, 0 for UDP and ICMP */
	__u8 icmp;		/* 1: an ICMP error for flow (forward, never insert) */
};

/* The 16-byte form of an IPv4 address: ::ffff:a.b.c.d. */
static __always_inline void map_v4(__u8 *dst, __be32 addr)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(dst + 12, &addr, 4);
}

/* parse_l2 finds the L3 offset behind at most one 802.1Q/802.1ad tag and
 * returns the IP version (4 or 6) in *family. */
static __always_inline __u32 parse_l2(void *data, void *data_end, __u32 *l3_off, __u8 *family)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return COUNTER_PASS_TRUNCATED;
	__be16 proto = eth->h_proto;
	*l3_off = ETH_HLEN;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vlan = (void *)(eth + 1);
		if ((void *)(vlan + 1) > data_end)
			return COUNTER_PASS_TRUNCATED;
		proto = vlan->encap_proto;
		*l3_off = ETH_HLEN + VLAN_HLEN;
	}
	if (proto == bpf_htons(ETH_P_IP))
		*family = 4;
	else if (proto == bpf_htons(ETH_P_IPV6))
		*family = 6;
	else
		return COUNTER_PASS_NOT_IP;
	return COUNTER_NONE;
}

/* check_ipv4 accepts an option-less, unfragmented IPv4 header whose total
 * length fits the frame; it returns why not otherwise. */
static __always_inline __u32 check_ipv4(struct iphdr *ip, void *data_end)
{
	if ((void *)(ip + 1) > data_end)
		return COUNTER_PASS_TRUNCATED;
	if (ip->version != 4 || ip->ihl < 5)
		return COUNTER_PASS_BAD_HEADER;
	if (ip->ihl != 5)
		return COUNTER_PASS_IP_OPTIONS;
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return COUNTER_PASS_FRAGMENT;
	__u32 len = bpf_ntohs(ip->tot_len);
	if (len < IPV4_HLEN || (void *)ip + len > data_end)
		return COUNTER_PASS_BAD_LENGTH;
	return COUNTER_NONE;
}

/* is_ipv6_ext says whether nexthdr is an extension header (RFC 8200 4.1,
 * plus ESP/AH which also hide the transport header). */
static __always_inline int is_ipv6_ext(__u8 nexthdr)
{
	switch (nexthdr) {
	case PROTO_HOPOPTS:
	case PROTO_ROUTING:
	case PROTO_FRAGMENT:
	case PROTO_ESP:
	case PROTO_AH:
	case PROTO_DSTOPTS:
	case PROTO_MH:
	case PROTO_HIP:
	case PROTO_SHIM6:
		return 1;
	}
	return 0;
}

/* check_ipv6 accepts an IPv6 header whose payload fits the frame. */
static __always_inline __u32 check_ipv6(struct ipv6hdr *ip6, void *data_end)
{
	if ((void *)(ip6 + 1) > data_end)
		return COUNTER_PASS_TRUNCATED;
	if (ip6->version != 6)
		return COUNTER_PASS_BAD_HEADER;
	if ((void *)(ip6 + 1) + bpf_ntohs(ip6->payload_len) > data_end)
		return COUNTER_PASS_BAD_LENGTH;
	if (is_ipv6_ext(ip6->nexthdr))
		return COUNTER_PASS_IPV6_EXT;
	return COUNTER_NONE;
}

/* tos6 is the traffic class of an IPv6 header. */
static __always_inline __u8 tos6(struct ipv6hdr *ip6)
{
	return (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
}

#endif
