/* flow.h: the balancer's parse of a packet into a flow key: TCP and UDP
 * directly, ICMP errors from the packet they quote. */
#ifndef L4LB_FLOW_H
#define L4LB_FLOW_H

#include "parse.h"

/* parse_ports reads the transport header of a TCP or UDP packet whose IP
 * payload is len bytes long. */
static __always_inline __u32 parse_ports(void *l4, void *data_end, __u32 len, __u8 proto,
					 struct packet *p)
{
	if (proto == PROTO_TCP) {
		struct tcphdr *tcp = l4;
		if (len < sizeof(*tcp))
			return COUNTER_PASS_BAD_LENGTH;
		if ((void *)(tcp + 1) > data_end)
			return COUNTER_PASS_TRUNCATED;
		if (tcp->doff < 5)
			return COUNTER_PASS_BAD_HEADER;
		p->tcp_flags = ((__u8 *)tcp)[13];
		p->flow.client_port = tcp->source;
		p->flow.vip_port = tcp->dest;
	} else {
		struct udphdr *udp = l4;
		if (len < sizeof(*udp))
			return COUNTER_PASS_BAD_LENGTH;
		if ((void *)(udp + 1) > data_end)
			return COUNTER_PASS_TRUNCATED;
		p->flow.client_port = udp->source;
		p->flow.vip_port = udp->dest;
	}
	p->flow.proto = proto;
	return COUNTER_NONE;
}

/* quoted_ports reads the first four L4 bytes of a quoted packet (a v4 quote
 * may carry only eight), swapped: the quote went VIP -> client. */
static __always_inline __u32 quoted_ports(__be16 *ports, void *data_end, __u8 proto,
					  struct packet *p)
{
	if (proto != PROTO_TCP && proto != PROTO_UDP)
		return COUNTER_PASS_ICMP;
	if ((void *)(ports + 2) > data_end)
		return COUNTER_PASS_ICMP;
	p->flow.vip_port = ports[0];
	p->flow.client_port = ports[1];
	p->flow.proto = proto;
	p->icmp = 1;
	return COUNTER_NONE;
}

/* parse_icmp4 takes a destination-unreachable (incl. fragmentation needed)
 * apart: icmp header, quoted IPv4 header without options, 4 port bytes. */
static __always_inline __u32 parse_icmp4(void *l4, void *data_end, __u32 len, struct packet *p)
{
	struct icmp_hdr *icmp = l4;
	if ((void *)(icmp + 1) > data_end)
		return COUNTER_PASS_TRUNCATED;
	if (icmp->type != ICMP_DEST_UNREACH)
		return COUNTER_PASS_ICMP;
	struct iphdr *in = (void *)(icmp + 1);
	if (len < sizeof(*icmp) + IPV4_HLEN + 4 || (void *)(in + 1) > data_end)
		return COUNTER_PASS_ICMP;
	if (in->version != 4 || in->ihl != 5 || (in->frag_off & bpf_htons(IP_OFFSET)))
		return COUNTER_PASS_ICMP;
	map_v4(p->flow.vip, in->saddr);
	map_v4(p->flow.client, in->daddr);
	return quoted_ports((void *)(in + 1), data_end, in->protocol, p);
}

/* parse_icmp6 takes a destination-unreachable or packet-too-big apart:
 * icmp6 header, quoted IPv6 header (no extension headers), 4 port bytes. */
static __always_inline __u32 parse_icmp6(void *l4, void *data_end, __u32 len, struct packet *p)
{
	struct icmp_hdr *icmp = l4;
	if ((void *)(icmp + 1) > data_end)
		return COUNTER_PASS_TRUNCATED;
	if (icmp->type != ICMPV6_DEST_UNREACH && icmp->type != ICMPV6_PKT_TOOBIG)
		return COUNTER_PASS_ICMP;
	struct ipv6hdr *in = (void *)(icmp + 1);
	if (len < sizeof(*icmp) + IPV6_HLEN + 4 || (void *)(in + 1) > data_end)
		return COUNTER_PASS_ICMP;
	if (in->version != 6)
		return COUNTER_PASS_ICMP;
	__builtin_memcpy(p->flow.vip, &in->saddr, 16);
	__builtin_memcpy(p->flow.client, &in->daddr, 16);
	return quoted_ports((void *)(in + 1), data_end, in->nexthdr, p);
}

/* parse_ipv4 parses an IPv4 packet at ip into p. */
static __always_inline __u32 parse_ipv4(struct iphdr *ip, void *data_end, struct packet *p)
{
	__u32 r = check_ipv4(ip, data_end);
	if (r != COUNTER_NONE)
		return r;
	p->l3_len = bpf_ntohs(ip->tot_len);
	p->tos = ip->tos;
	__u32 len = p->l3_len - IPV4_HLEN;
	switch (ip->protocol) {
	case PROTO_TCP:
	case PROTO_UDP:
		map_v4(p->flow.client, ip->saddr);
		map_v4(p->flow.vip, ip->daddr);
		return parse_ports(ip + 1, data_end, len, ip->protocol, p);
	case PROTO_ICMP:
		return parse_icmp4(ip + 1, data_end, len, p);
	}
	return COUNTER_PASS_OTHER_PROTO;
}

/* parse_ipv6 parses an IPv6 packet at ip6 into p. */
static __always_inline __u32 parse_ipv6(struct ipv6hdr *ip6, void *data_end, struct packet *p)
{
	__u32 r = check_ipv6(ip6, data_end);
	if (r != COUNTER_NONE)
		return r;
	__u32 len = bpf_ntohs(ip6->payload_len);
	p->l3_len = IPV6_HLEN + len;
	p->tos = tos6(ip6);
	switch (ip6->nexthdr) {
	case PROTO_TCP:
	case PROTO_UDP:
		__builtin_memcpy(p->flow.client, &ip6->saddr, 16);
		__builtin_memcpy(p->flow.vip, &ip6->daddr, 16);
		return parse_ports(ip6 + 1, data_end, len, ip6->nexthdr, p);
	case PROTO_ICMPV6:
		return parse_icmp6(ip6 + 1, data_end, len, p);
	}
	return COUNTER_PASS_OTHER_PROTO;
}

/* parse_packet fills p from the frame, or returns why the frame passes. */
static __always_inline __u32 parse_packet(struct xdp_md *ctx, struct packet *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = 0;
	__u8 family = 0;

	p->frame_len = data_end - data;
	__u32 r = parse_l2(data, data_end, &off, &family);
	if (r != COUNTER_NONE)
		return r;
	p->l3_off = off;
	p->family = family;
	if (family == 4)
		return parse_ipv4(data + off, data_end, p);
	return parse_ipv6(data + off, data_end, p);
}

#endif
