/* conntrack.h: flow -> backend affinity and the Maglev choice for flows the
 * table does not (or must not) pin. Rules, after Katran and Cilium:
 *   hit, backend usable        -> keep it; refresh last_seen (at most
 *                                 every CT_REFRESH_JIFFIES);
 *                                 FIN sets FLOW_FIN; RST deletes the entry
 *   hit, backend gone/inactive -> as a miss (COUNTER_CT_STALE)
 *   TCP SYN without ACK        -> Maglev choice, rewrites an entry in place
 *   miss                       -> Maglev choice, inserted (never for RST);
 *                                 over the VIP's new_flow_rate: not inserted
 *   ICMP error                 -> lookup only; Maglev on a miss; no writes */
#ifndef L4LB_CONNTRACK_H
#define L4LB_CONNTRACK_H

#include "hash.h"
#include "maps.h"
#include "parse.h"
#include "rate.h"
#include "stats.h"

/* The kernel's struct bpf_map, reduced to the field we read; CO-RE fixes
 * the offset against the running kernel's BTF at load time. */
struct bpf_map {
	__u32 max_entries;
} __attribute__((preserve_access_index));

/* usable_backend returns backend idx if it exists and is active. */
static __always_inline struct backend *usable_backend(__u32 idx)
{
	if (idx == 0)
		return NULL;
	struct backend *be = bpf_map_lookup_elem(&backends, &idx);
	if (!be || !be->family || !(be->flags & BACKEND_ACTIVE))
		return NULL;
	return be;
}

/* maglev_pick returns the backend index in the flow's slot of the VIP's
 * table, 0 when there is no table. The size is the inner map's own
 * max_entries, read from the same map the slot is: never out of step. */
static __always_inline __u32 maglev_pick(const struct packet *p, const struct vip_value *vip)
{
	__u32 vip_index = vip->index;
	struct bpf_map *table = bpf_map_lookup_elem(&maglev, &vip_index);
	if (!table)
		return 0;
	__u32 size = table->max_entries;
	if (size == 0)
		return 0;
	__u32 slot = reduce(flow_hash(&p->flow, vip->hash_key), size);
	__u32 *idx = bpf_map_lookup_elem(table, &slot);
	return idx ? *idx : 0;
}

/* is_syn says whether a packet opens a TCP connection (SYN without ACK). */
static __always_inline int is_syn(const struct packet *p)
{
	return p->flow.proto == PROTO_TCP &&
	       (p->tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN;
}

/* ct_touch updates a live entry on a hit. An ordinary hit writes nothing:
 * FLOW_FIN is set once, and last_seen only when the entry's jiffies stamp
 * is CT_REFRESH_JIFFIES old (bpf_jiffies64 is inlined: a load, no clock
 * read). */
static __always_inline void ct_touch(struct flow_state *st, const struct packet *p)
{
	if (p->tcp_flags & TH_RST) {
		bpf_map_delete_elem(&conntrack, &p->flow);
		count(COUNTER_CT_RST);
		return;
	}
	if ((p->tcp_flags & TH_FIN) && !(st->flags & FLOW_FIN))
		st->flags |= FLOW_FIN;
	__u32 j = bpf_jiffies64();
	if (j - st->touched >= CT_REFRESH_JIFFIES) {
		st->touched = j;
		st->last_seen = bpf_ktime_get_coarse_ns();
	}
}

/* ct_insert pins a new flow of VIP vip_index to idx. */
static __always_inline void ct_insert(const struct packet *p, __u32 vip_index, __u32 idx, __u64 now)
{
	struct flow_state st = {
		.last_seen = now,
		.touched = bpf_jiffies64(),
		.backend = idx,
		.vip = vip_index,
		.flags = (p->tcp_flags & TH_FIN) ? FLOW_FIN : 0,
	};
	if (bpf_map_update_elem(&conntrack, &p->flow, &st, BPF_ANY))
		count(COUNTER_CT_FULL);
	else
		count(COUNTER_CT_NEW);
}

/* select_backend returns the flow's backend (NULL: none usable) and its
 * index; *new_flow says the flow was (re)pinned (NEW_PINNED) or forwarded
 * without an entry because the VIP is over its new_flow_rate
 * (NEW_UNTRACKED). st is the flow's conntrack entry (NULL: none), looked
 * up by the caller. */
static __always_inline struct backend *select_backend(const struct packet *p,
						      const struct vip_value *vip,
						      struct flow_state *st,
						      __u32 *idx, __u8 *new_flow)
{
	int syn = is_syn(p);
	__u64 now = 0;
	struct backend *be;

	if (st && !syn) {
		*idx = st->backend;
		be = usable_backend(*idx);
		if (be) {
			count(COUNTER_CT_HIT);
			if (!p->icmp) {
				if (st->vip != vip->index)
					st->vip = vip->index; /* pinned before vip_refs, or the VIP moved */
				ct_touch(st, p);
			}
			return be;
		}
		count(COUNTER_CT_STALE);
	}
	*idx = maglev_pick(p, vip);
	be = usable_backend(*idx);
	if (!be || p->icmp)
		return be;
	if (p->tcp_flags & TH_RST) {
		if (st)
			bpf_map_delete_elem(&conntrack, &p->flow);
		return be;
	}
	now = bpf_ktime_get_coarse_ns();
	if (st && syn) {
		/* The entry exists: rewrite it in place. An update would pop a
		 * free LRU node and push the old one back, for the same key. */
		st->backend = *idx;
		st->vip = vip->index;
		st->flags = 0;
		st->last_seen = now;
		st->touched = bpf_jiffies64();
		count(COUNTER_CT_SYN);
	} else if (new_flow_admitted(vip, now)) {
		ct_insert(p, vip->index, *idx, now);
	} else {
		count(COUNTER_CT_UNTRACKED);
		*new_flow = NEW_UNTRACKED;
		return be;
	}
	*new_flow = NEW_PINNED;
	return be;
}

#endif
