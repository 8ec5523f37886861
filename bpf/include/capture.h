/* capture.h: l4lb xdp capture. A VIP whose entry carries VIP_CAPTURE has
 * its packets sampled into capture_ring: the first CAPTURE_SNAP bytes of
 * the frame as received, with the verdict and the backend. Off (the
 * flag clear, every VIP but the one captured), the cost is one test of
 * vip->flags, which balance has already loaded; not-a-VIP packets never
 * come here.
 *
 * Why a ring buffer reserved before the verdict: the frame is copied as
 * it arrived, before forwarding encapsulates or rewrites it, and the
 * record is submitted once the verdict and backend are known (discarded
 * when --backend does not match). bpf_xdp_output (a perf event array)
 * copies from the context at the moment of the call, so it would give
 * either the verdict or the original frame, not both; it also needs a
 * per-CPU reader.
 *
 * Bounds: capture_filter admits at most one sample per interval (GCRA of
 * rate.h, a second's burst), so a busy VIP pays the copy for at most the
 * capture's packets a second; expires ends a capture whose reader or
 * daemon died, without Go. */
#ifndef L4LB_CAPTURE_H
#define L4LB_CAPTURE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "maps.h"
#include "parse.h"
#include "rate.h"

#define CAPTURE_SNAP sizeof(((struct capture_record *)0)->data)
#define CAPTURE_RING_SIZE (256 * 1024)

/* Sampled packets, read by the daemon (bpf.Capture). Not pinned: a
 * capture belongs to the process that runs it. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, CAPTURE_RING_SIZE);
} capture_ring SEC(".maps");

/* What is sampled (one entry; see struct capture_filter). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct capture_filter);
} capture_filter SEC(".maps");

/* Anchor so that struct capture_record reaches BTF (records are not a
 * map value), where bpf2go -type finds it; nothing reads it. */
struct capture_record *const volatile anchor_capture_record;

/* capture_sample reserves a record for a packet of the VIP the filter
 * names, within its rate and lease, and copies the frame into it. */
static __always_inline struct capture_record *capture_sample(struct xdp_md *ctx, const struct packet *p,
							     __u32 vip_index)
{
	__u32 zero = 0;
	struct capture_filter *f = bpf_map_lookup_elem(&capture_filter, &zero);
	if (!f || f->vip_index != vip_index)
		return NULL;
	__u64 now = bpf_ktime_get_ns();
	if (now > f->expires || !rate_admit(&f->rate, now, f->interval))
		return NULL;
	struct capture_record *c = bpf_ringbuf_reserve(&capture_ring, sizeof(*c), 0);
	if (!c) {
		__sync_fetch_and_add(&f->lost, 1);
		return NULL;
	}
	__u32 len = p->frame_len;
	if (len > CAPTURE_SNAP)
		len = CAPTURE_SNAP;
	if (len < ETH_HLEN || bpf_xdp_load_bytes(ctx, 0, c->data, len) < 0)
		len = 0;
	c->time = now;
	c->frame_len = p->frame_len;
	c->cap_len = len;
	c->vip_index = vip_index;
	c->backend = f->backend; /* the wanted one, until capture_end */
	c->reason = COUNTER_NONE;
	c->action = XDP_ABORTED;
	return c;
}

/* capture_begin samples the packet when its VIP is being captured; NULL
 * otherwise (then capture_end does nothing). */
static __always_inline struct capture_record *capture_begin(struct xdp_md *ctx, const struct packet *p,
							    const struct vip_value *vip)
{
	if (!(vip->flags & VIP_CAPTURE))
		return NULL;
	return capture_sample(ctx, p, vip->index);
}

/* capture_end completes a sample with the verdict (its reason and XDP
 * action) and the backend, or discards it when the capture wants another
 * backend. */
static __always_inline void capture_end(struct capture_record *c, __u32 reason, __u32 action, __u32 backend)
{
	if (!c)
		return;
	if (c->backend && c->backend != backend) {
		bpf_ringbuf_discard(c, 0);
		return;
	}
	c->reason = reason;
	c->action = action;
	c->backend = backend;
	bpf_ringbuf_submit(c, 0);
}

#endif
