/* guard.h: the checks a packet to a VIP passes before any conntrack lookup
 * or backend choice: the VIP's access list and the per-source SYN rate.
 * Both cost nothing when off: a VIP without VIP_ACL does no trie lookup,
 * and a non-SYN or syn_rate_per_source = 0 touches no rate state. */
#ifndef L4LB_GUARD_H
#define L4LB_GUARD_H

#include "conntrack.h"
#include "maps.h"
#include "parse.h"
#include "rate.h"
#include "stats.h"

/* acl_allows looks the client up under the VIP's index: the most specific
 * network decides; none: allowed unless the VIP has an allow list. */
static __always_inline int acl_allows(const struct packet *p, const struct vip_value *vip)
{
	struct acl_key key = {
		.prefixlen = 32 + 128,
		.vip_index = vip->index,
	};
	__builtin_memcpy(key.addr, p->flow.client, 16);
	struct acl_rule *r = bpf_map_lookup_elem(&acl, &key);
	if (r)
		return r->allowed;
	return !(vip->flags & VIP_DEFAULT_DENY);
}

/* syn_over_rate says whether a SYN's source is above syn_rate_per_source.
 * A source seen first is admitted and gets a state. */
static __always_inline int syn_over_rate(const struct packet *p)
{
	__u32 zero = 0;
	struct lb_config *c = bpf_map_lookup_elem(&config, &zero);
	if (!c || !c->syn_interval)
		return 0;
	__u64 now = bpf_ktime_get_coarse_ns();
	/* The client address is the first 16 bytes of the flow key. */
	struct rate_state *st = bpf_map_lookup_elem(&syn_sources, p->flow.client);
	if (!st) {
		struct rate_state fresh = { .tat = now + c->syn_interval };
		bpf_map_update_elem(&syn_sources, p->flow.client, &fresh, BPF_ANY);
		return 0;
	}
	return !rate_admit(st, now, c->syn_interval);
}

/* guard returns COUNTER_DROP_ACL or COUNTER_DROP_SYN_RATE for a packet to
 * drop, COUNTER_NONE to go on. Not for ICMP errors: their "client" is the
 * quoted destination, not the sender.
 *
 * A denied client's packet is dropped, except, for an xdp VIP, a non-SYN
 * packet of a flow the conntrack holds: the client was allowed when the
 * flow began and a reload denied it since, and established flows survive
 * a reload (as nginx and HAProxy keep their connections). That costs a
 * conntrack lookup only for denied packets that are not SYNs. For a
 * guard-only (proxy) TCP VIP only SYNs are checked: the kernel owns the
 * established connections, and answers a stray segment with a reset. */
static __always_inline __u32 guard(const struct packet *p, const struct vip_value *vip)
{
	int syn = is_syn(p);
	__u8 flags = vip->flags;

	if (flags & VIP_ACL) {
		int guard_only = flags & VIP_GUARD_ONLY;
		if ((syn || !guard_only || p->flow.proto != PROTO_TCP) && !acl_allows(p, vip)) {
			if (syn || guard_only || !bpf_map_lookup_elem(&conntrack, &p->flow))
				return COUNTER_DROP_ACL;
			count(COUNTER_ACL_ESTABLISHED);
		}
	}
	if (syn && syn_over_rate(p))
		return COUNTER_DROP_SYN_RATE;
	return COUNTER_NONE;
}

#endif
