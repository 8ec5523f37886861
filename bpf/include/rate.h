/* rate.h: the GCRA the rate guards share (syn_rate_per_source in guard.h,
 * new_flow_rate in conntrack.h). */
#ifndef L4LB_RATE_H
#define L4LB_RATE_H

#include "maps.h"

/* rate_admit is a GCRA with a burst of one second's worth: an event is
 * admitted while the theoretical arrival time, one interval on, is at most
 * a second ahead of now (the same rule as l4/guard's per-client rate).
 * The read-modify-write is not atomic: CPUs admitting for the same state
 * at the same moment may each pass, so the rate is approximate (it can be
 * exceeded by about one event per racing CPU; never undercut). */
static __always_inline int rate_admit(struct rate_state *st, __u64 now, __u64 interval)
{
	__u64 tat = st->tat;
	if (tat < now)
		tat = now;
	tat += interval;
	if (tat - now > RATE_BURST_NS)
		return 0;
	st->tat = tat;
	return 1;
}

/* new_flow_admitted says whether the VIP may insert one more flow into the
 * conntrack now (new_flow_rate). Over the rate the flow is still forwarded
 * by the Maglev table, only not inserted (Katran's choice): a flood of
 * spoofed sources cannot push established flows out of the LRU. */
static __always_inline int new_flow_admitted(const struct vip_value *vip, __u64 now)
{
	__u32 interval = vip->new_flow_interval;
	if (!interval)
		return 1;
	__u32 idx = vip->index;
	struct rate_state *st = bpf_map_lookup_elem(&vip_rates, &idx);
	if (!st)
		return 1;
	return rate_admit(st, now, interval);
}

#endif
