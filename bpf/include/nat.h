/* nat.h: forward = "nat" (full NAT, IPVS NAT / LoxiLB fullnat style). A
 * client -> VIP packet leaves as NAT address:port -> backend:port; the
 * backend's reply, NAT address:port <- backend:port, arrives here and
 * leaves as VIP -> client. Backends need nothing: no decap, no VIP on lo.
 *
 * Two LRU maps hold a flow's mapping, one per direction:
 *   nat_flows    client -> VIP flow   -> (NAT address, NAT port, backend)
 *   nat_reverse  backend -> NAT:port  -> client -> VIP flow, last_seen
 * nat_reverse owns the ports: a port is given to a flow only by inserting
 * its reverse entry with BPF_NOEXIST (or by taking over an entry idle past
 * its timeout with a compare-and-swap on last_seen), so two live flows
 * never share a port. A nat_flows hit is trusted only while the reverse
 * entry it names still holds this flow: when the LRU evicted the reverse
 * entry (and maybe gave the port to another flow), the flow re-inserts it
 * or takes another port; a forward entry can never point at a port that
 * another flow owns. An evicted forward entry leaves a reverse entry that
 * still names the flow: the next packet finds and adopts it.
 *
 * Ports are per (backend address, backend port, NAT address, protocol):
 * the reverse key holds all of them. Allocation starts at a hash of the
 * flow in [port_lo, port_hi] and probes NAT_PROBES ports at most; none
 * free: the packet is dropped (drop_nat_exhausted), never sent on a port
 * another flow holds. ICMP errors to a NAT VIP pass to the kernel. */
#ifndef L4LB_NAT_H
#define L4LB_NAT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "forward.h"
#include "hash.h"
#include "maps.h"
#include "parse.h"
#include "stats.h"

/* Ports tried for a new mapping before the packet drops as exhausted. */
#define NAT_PROBES 32

/* The NAT settings, written by Go (struct nat_config). */
struct nat_config nat_cfg;

/* Client -> VIP flow -> its NAT source (see the top of this file). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DEFAULT_CT_SIZE);
	__type(key, struct flow_key);
	__type(value, struct nat_mapping);
} nat_flows SEC(".maps");

/* Reply key (backend -> NAT address:port) -> the client -> VIP flow. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DEFAULT_CT_SIZE);
	__type(key, struct flow_key);
	__type(value, struct nat_reverse);
} nat_reverse SEC(".maps");

volatile const enum nat_flag anchor_nat_flag;

/* flow_eq compares two flow keys (40 bytes, 8-aligned). */
static __always_inline int flow_eq(const struct flow_key *a, const struct flow_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	__u64 d = 0;
#pragma unroll
	for (int i = 0; i < (int)(sizeof(*a) / 8); i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

/* addr_eq compares two 16-byte addresses. */
static __always_inline int addr_eq(const __u8 *a, const __u8 *b)
{
	__u64 x[2], y[2];
	__builtin_memcpy(x, a, 16);
	__builtin_memcpy(y, b, 16);
	return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
}

/* nat_addr writes the NAT address of family in the 16-byte form; 0: unset. */
static __always_inline int nat_addr(__u8 family, __u8 *addr)
{
	if (family == 4) {
		if (is_zero(nat_cfg.addr4, 4))
			return 0;
		__be32 a4;
		__builtin_memcpy(&a4, nat_cfg.addr4, 4);
		map_v4(addr, a4);
		return 1;
	}
	if (is_zero(nat_cfg.addr6, 16))
		return 0;
	__builtin_memcpy(addr, nat_cfg.addr6, 16);
	return 1;
}

/* nat_expired says whether a mapping idled past its timeout. */
static __always_inline int nat_expired(const struct nat_reverse *r, __u64 last, __u64 now)
{
	__u64 timeout = nat_cfg.udp_timeout;
	if (r->flow.proto == PROTO_TCP)
		timeout = (r->flags & NAT_CLOSING) ? nat_cfg.closed_timeout : nat_cfg.tcp_timeout;
	return now > last && now - last > timeout;
}

/* nat_touch refreshes a mapping on a packet of either direction. */
static __always_inline void nat_touch(struct nat_reverse *r, __u8 tcp_flags, __u64 now)
{
	if ((tcp_flags & (TH_FIN | TH_RST)) && !(r->flags & NAT_CLOSING))
		r->flags |= NAT_CLOSING;
	if (now - r->last_seen >= CT_REFRESH_NS)
		r->last_seen = now;
}

/* nat_claim makes the reverse key rk name flow f, if its port is free,
 * already f's, or idle past its timeout. It returns the counter of a new
 * mapping (COUNTER_NAT_NEW, COUNTER_NAT_RECLAIMED), COUNTER_NONE for f's
 * own entry, or COUNTER_MAX when another flow holds the port. */
static __always_inline __u32 nat_claim(const struct flow_key *rk, const struct packet *p,
				       __u32 backend, __u64 now)
{
	struct nat_reverse fresh = {
		.last_seen = now,
		.backend = backend,
		.flags = (p->tcp_flags & (TH_FIN | TH_RST)) ? NAT_CLOSING : 0,
	};
	__builtin_memcpy(&fresh.flow, &p->flow, sizeof(fresh.flow));
	if (bpf_map_update_elem(&nat_reverse, rk, &fresh, BPF_NOEXIST) == 0)
		return COUNTER_NAT_NEW;
	struct nat_reverse *r = bpf_map_lookup_elem(&nat_reverse, rk);
	if (!r)
		return COUNTER_MAX; /* deleted or evicted meanwhile: try the next port */
	if (flow_eq(&r->flow, &p->flow)) {
		nat_touch(r, p->tcp_flags, now);
		return COUNTER_NONE;
	}
	__u64 last = r->last_seen;
	if (!nat_expired(r, last, now))
		return COUNTER_MAX;
	/* Take the idle entry over: of CPUs racing for it, one wins the swap
	 * and the others see it fresh and move on. */
	if (__sync_val_compare_and_swap(&r->last_seen, last, now) != last)
		return COUNTER_MAX;
	__builtin_memcpy(&r->flow, &p->flow, sizeof(r->flow));
	r->flags = fresh.flags;
	r->backend = backend;
	return COUNTER_NAT_RECLAIMED;
}

/* reverse_key is the key of the replies to p's flow from be through
 * addr:port (the backend port is the VIP's: xdp VIPs do not map ports). */
static __always_inline void reverse_key(struct flow_key *rk, const struct packet *p,
					const struct backend *be, const __u8 *addr, __be16 port)
{
	__builtin_memcpy(rk->client, be->addr, 16);
	__builtin_memcpy(rk->vip, addr, 16);
	rk->client_port = p->flow.vip_port;
	rk->vip_port = port;
	rk->proto = p->flow.proto;
}

/* nat_reuse returns 1 when m, p's forward entry, still holds its port:
 * its reverse entry names p's flow, or was gone and is re-inserted. */
static __always_inline int nat_reuse(const struct packet *p, const struct backend *be,
				     __u32 idx, const struct nat_mapping *m, const __u8 *addr,
				     __u64 now)
{
	struct flow_key rk = {};

	if (m->backend != idx || !addr_eq(m->addr, addr))
		return 0;
	reverse_key(&rk, p, be, addr, m->port);
	struct nat_reverse *r = bpf_map_lookup_elem(&nat_reverse, &rk);
	if (r && flow_eq(&r->flow, &p->flow)) {
		nat_touch(r, p->tcp_flags, now);
		return 1;
	}
	if (r)
		return 0; /* the LRU dropped ours and the port went to another flow */
	__u32 c = nat_claim(&rk, p, idx, now);
	return c == COUNTER_NAT_NEW || c == COUNTER_NONE;
}

/* nat_release deletes the reverse entry of an old mapping of p's flow
 * (another backend, or an older NAT address), if it still names p. */
static __always_inline void nat_release(const struct packet *p, const struct nat_mapping *m)
{
	struct flow_key rk = {};
	struct backend *old = bpf_map_lookup_elem(&backends, &m->backend);

	if (!old)
		return;
	reverse_key(&rk, p, old, m->addr, m->port);
	struct nat_reverse *r = bpf_map_lookup_elem(&nat_reverse, &rk);
	if (r && flow_eq(&r->flow, &p->flow))
		bpf_map_delete_elem(&nat_reverse, &rk);
}

/* What the probe loop of nat_alloc carries. */
struct nat_probe {
	struct flow_key rk;
	const struct packet *p;
	__u64 now;
	__u32 idx, lo, n, start;
	__be16 port;	/* the port found, 0 while none */
};

/* nat_probe_one tries the i-th port of a probe (a bpf_loop callback: the
 * verifier checks it once, not once per port); 1 stops the loop. */
static long nat_probe_one(__u32 i, void *arg)
{
	struct nat_probe *pr = arg;
	__u32 off = pr->start + i;

	if (i >= pr->n)
		return 1;
	if (off >= pr->n)
		off -= pr->n;
	pr->rk.vip_port = bpf_htons(pr->lo + off);
	__u32 c = nat_claim(&pr->rk, pr->p, pr->idx, pr->now);
	if (c == COUNTER_MAX)
		return 0;
	if (c != COUNTER_NONE)
		count(c);
	pr->port = pr->rk.vip_port;
	return 1;
}

/* nat_alloc finds p's flow a NAT port towards be: hash-derived start,
 * NAT_PROBES tries. 0 (never a NAT port, port_lo >= 1): none free. */
static __always_inline __be16 nat_alloc(const struct packet *p, const struct backend *be,
					__u32 idx, const __u8 *addr, __u64 now)
{
	struct nat_probe pr = {.p = p, .now = now, .idx = idx, .lo = nat_cfg.port_lo};
	__u32 hi = nat_cfg.port_hi;

	if (pr.lo == 0 || hi < pr.lo)
		return 0;
	pr.n = hi - pr.lo + 1;
	pr.start = reduce(flow_hash(&p->flow, HASH_FIVE_TUPLE), pr.n);
	reverse_key(&pr.rk, p, be, addr, 0);
	bpf_loop(NAT_PROBES, nat_probe_one, &pr, 0);
	return pr.port;
}

/* nat_map returns p's NAT port towards be (0: exhausted), making the
 * mapping when p's flow has none that still holds. */
static __always_inline __be16 nat_map(const struct packet *p, const struct backend *be,
				      __u32 idx, const __u8 *addr)
{
	__u64 now = bpf_ktime_get_coarse_ns();
	struct nat_mapping *m = bpf_map_lookup_elem(&nat_flows, &p->flow);

	if (m && nat_reuse(p, be, idx, m, addr, now))
		return m->port;
	if (m)
		nat_release(p, m);
	__be16 port = nat_alloc(p, be, idx, addr, now);
	if (!port)
		return 0;
	struct nat_mapping nm = {.port = port, .backend = idx};
	__builtin_memcpy(nm.addr, addr, 16);
	bpf_map_update_elem(&nat_flows, &p->flow, &nm, BPF_ANY);
	return port;
}

/* csum_fold folds a 64-bit ones' complement sum to 16 bits. */
static __always_inline __u16 csum_fold64(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return s;
}

/* csum_update applies diff (a bpf_csum_diff of old and new words) to a
 * stored checksum, RFC 1624: HC' = ~(~HC + ~m + m'). */
static __always_inline __u16 csum_update(__u16 check, __u32 diff)
{
	return ~csum_fold64((__u64)(__u16)~check + diff);
}

/* nat_fib routes the rewritten packet src -> dst (16-byte forms). */
static __always_inline __u32 nat_fib(struct xdp_md *ctx, const struct packet *p, const __u8 *src,
				     const __u8 *dst, struct bpf_fib_lookup *fib)
{
	fib->ifindex = ctx->ingress_ifindex;
	fib->l4_protocol = p->flow.proto;
	fib->tot_len = p->l3_len;
	if (p->family == 4) {
		fib->family = AF_INET;
		fib->tos = p->tos;
		__builtin_memcpy(&fib->ipv4_src, src + 12, 4);
		__builtin_memcpy(&fib->ipv4_dst, dst + 12, 4);
	} else {
		fib->family = AF_INET6;
		__builtin_memcpy(fib->ipv6_src, src, 16);
		__builtin_memcpy(fib->ipv6_dst, dst, 16);
	}
	return fib_reason(bpf_fib_lookup(ctx, fib, sizeof(*fib), 0));
}

/* l4_check finds the L4 checksum of p at l4 (NULL: none to update, a
 * UDP/IPv4 datagram sent without one). */
static __always_inline __u16 *l4_check(const struct packet *p, void *l4, void *data_end)
{
	if (p->flow.proto == PROTO_TCP) {
		struct tcphdr *tcp = l4;
		if ((void *)(tcp + 1) > data_end)
			return NULL;
		return &tcp->check;
	}
	struct udphdr *udp = l4;
	if ((void *)(udp + 1) > data_end)
		return NULL;
	if (p->family == 4 && udp->check == 0)
		return NULL;
	return &udp->check;
}

/* set_check stores an L4 checksum; UDP sends a computed 0 as 0xffff. */
static __always_inline void set_check(const struct packet *p, __u16 *check, __u16 v)
{
	if (v == 0 && p->flow.proto == PROTO_UDP)
		v = 0xffff;
	*check = v;
}

/* nat_l4 writes sport, dport into the L4 header at l4 (8 bytes known to
 * be in the frame) and updates its checksum for them and the address
 * change d_addr (a bpf_csum_diff of the old and new addresses). */
static __always_inline void nat_l4(const struct packet *p, __be16 *ports, void *data_end,
				   __u32 d_addr, __be16 sport, __be16 dport)
{
	__be16 from[2] = {ports[0], ports[1]}, to[2] = {sport, dport};
	__u32 d_ports = bpf_csum_diff((__be32 *)from, 4, (__be32 *)to, 4, 0);
	__u16 *check = l4_check(p, ports, data_end);

	if (check)
		set_check(p, check, csum_update(*check, csum_fold64((__u64)d_addr + d_ports)));
	ports[0] = sport;
	ports[1] = dport;
}

/* nat_rewrite4 moves an IPv4 packet to src:sport -> dst:dport, both
 * checksums updated incrementally; l3_off is a constant. */
static __always_inline __u32 nat_rewrite4(struct xdp_md *ctx, const struct packet *p,
					  const __u8 *src, const __u8 *dst, __be16 sport,
					  __be16 dport, __u32 l3_off)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + l3_off;
	__be32 from[2], to[2];

	if ((void *)(ip + 1) + sizeof(struct udphdr) > data_end)
		return COUNTER_DROP_ENCAP;
	from[0] = ip->saddr;
	from[1] = ip->daddr;
	__builtin_memcpy(&to[0], src + 12, 4);
	__builtin_memcpy(&to[1], dst + 12, 4);
	__u32 d_addr = bpf_csum_diff(from, sizeof(from), to, sizeof(to), 0);
	nat_l4(p, (void *)(ip + 1), data_end, d_addr, sport, dport);
	ip->check = csum_update(ip->check, d_addr);
	ip->saddr = to[0];
	ip->daddr = to[1];
	return COUNTER_NONE;
}

/* nat_rewrite6 is nat_rewrite4 for IPv6 (no header checksum). */
static __always_inline __u32 nat_rewrite6(struct xdp_md *ctx, const struct packet *p,
					  const __u8 *src, const __u8 *dst, __be16 sport,
					  __be16 dport, __u32 l3_off)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + l3_off;
	__be32 to[8];

	if ((void *)(ip6 + 1) + sizeof(struct udphdr) > data_end)
		return COUNTER_DROP_ENCAP;
	__builtin_memcpy(&to[0], src, 16);
	__builtin_memcpy(&to[4], dst, 16);
	__u32 d_addr = bpf_csum_diff((__be32 *)&ip6->saddr, 32, to, sizeof(to), 0);
	nat_l4(p, (void *)(ip6 + 1), data_end, d_addr, sport, dport);
	__builtin_memcpy(&ip6->saddr, src, 16);
	__builtin_memcpy(&ip6->daddr, dst, 16);
	return COUNTER_NONE;
}

/* nat_send rewrites p to src:sport -> dst:dport and sends it where the
 * FIB says; it returns the final counter reason. */
static __always_inline __u32 nat_send(struct xdp_md *ctx, const struct packet *p,
				      const __u8 *src, const __u8 *dst, __be16 sport, __be16 dport)
{
	struct bpf_fib_lookup fib = {};
	__u32 r = nat_fib(ctx, p, src, dst, &fib);
	if (r != COUNTER_NONE)
		return r;
	int vlan = p->l3_off != ETH_HLEN;
	if (p->family == 4)
		r = vlan ? nat_rewrite4(ctx, p, src, dst, sport, dport, ETH_HLEN + VLAN_HLEN)
			 : nat_rewrite4(ctx, p, src, dst, sport, dport, ETH_HLEN);
	else
		r = vlan ? nat_rewrite6(ctx, p, src, dst, sport, dport, ETH_HLEN + VLAN_HLEN)
			 : nat_rewrite6(ctx, p, src, dst, sport, dport, ETH_HLEN);
	if (r != COUNTER_NONE)
		return r;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return COUNTER_DROP_ENCAP;
	return fib_out(ctx, eth, &fib);
}

/* nat_forward sends a client's packet to be (index idx) from the NAT
 * address and the flow's NAT port. */
static __always_inline __u32 nat_forward(struct xdp_md *ctx, const struct packet *p,
					 const struct backend *be, __u32 idx)
{
	__u8 addr[16];

	if (p->icmp)
		return COUNTER_PASS_ICMP;
	if (be->family != p->family || !nat_addr(p->family, addr))
		return COUNTER_DROP_NO_SOURCE;
	__be16 port = nat_map(p, be, idx, addr);
	if (!port)
		return COUNTER_DROP_NAT_EXHAUSTED;
	return nat_send(ctx, p, addr, be->addr, port, p->flow.vip_port);
}

/* nat_reply turns a backend's reply to a NAT address:port back into
 * VIP -> client. Anything else is not ours (COUNTER_PASS_NOT_VIP): with
 * no forward = nat VIP that costs one load and a compare. */
static __always_inline __u32 nat_reply(struct xdp_md *ctx, const struct packet *p)
{
	__u8 addr[16];

	if (!nat_cfg.enabled || p->icmp)
		return COUNTER_PASS_NOT_VIP;
	if (!nat_addr(p->family, addr) || !addr_eq(addr, p->flow.vip))
		return COUNTER_PASS_NOT_VIP;
	struct nat_reverse *r = bpf_map_lookup_elem(&nat_reverse, &p->flow);
	if (!r)
		return COUNTER_PASS_NOT_VIP;
	struct flow_key f = r->flow;
	nat_touch(r, p->tcp_flags, bpf_ktime_get_coarse_ns());
	__u32 v = nat_send(ctx, p, f.vip, f.client, f.vip_port, f.client_port);
	if (is_forwarded(v))
		count(COUNTER_NAT_REPLY);
	return v;
}

#endif
