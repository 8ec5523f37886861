/* stats.h: counter updates. All counter maps are per-CPU arrays, so plain
 * increments are race-free; Go sums the CPUs. */
#ifndef L4LB_STATS_H
#define L4LB_STATS_H

#include "maps.h"
#include "parse.h"

/* What select_backend did with a flow, for the per-VIP counters. */
#define NEW_PINNED 1
#define NEW_UNTRACKED 2

/* global_counters is the CPU's record of global counters. */
static __always_inline struct lb_counters *global_counters(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&counters, &zero);
}

/* count bumps a global counter. */
static __always_inline void count(__u32 reason)
{
	struct lb_counters *c = global_counters();
	if (c && reason < COUNTER_MAX)
		c->reason[reason] += 1;
}

/* is_forwarded says whether a final reason sent the packet on. */
static __always_inline int is_forwarded(__u32 reason)
{
	return reason == COUNTER_TX || reason == COUNTER_REDIRECT;
}

/* account charges a packet to its VIP and (when forwarded) its backend. */
static __always_inline void account(const struct packet *p, __u32 vip_index, __u32 backend,
				    __u32 reason, __u8 new_flow)
{
	struct vip_counters *vs = bpf_map_lookup_elem(&vip_stats, &vip_index);
	int fwd = is_forwarded(reason);
	if (vs) {
		vs->packets += fwd;
		vs->bytes += fwd ? p->frame_len : 0;
		vs->new_flows += new_flow == NEW_PINNED;
		vs->untracked += new_flow == NEW_UNTRACKED;
		vs->drops += !fwd;
	}
	if (!fwd || !backend)
		return;
	struct backend_counters *bs = bpf_map_lookup_elem(&backend_stats, &backend);
	if (bs) {
		bs->packets++;
		bs->bytes += p->frame_len;
		bs->new_flows += new_flow == NEW_PINNED;
	}
}

/* account_guard charges a packet a guard dropped to its VIP. */
static __always_inline void account_guard(__u32 vip_index, __u32 reason)
{
	struct vip_counters *vs = bpf_map_lookup_elem(&vip_stats, &vip_index);
	if (!vs)
		return;
	vs->drops++;
	if (reason == COUNTER_DROP_ACL)
		vs->acl_drops++;
	else
		vs->syn_rate_drops++;
}

#endif
