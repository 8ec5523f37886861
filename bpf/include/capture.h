/* capture.h: l4lb xdp capture. A VIP whose entry carries VIP_CAPTURE has
 * its packets sampled into capture_ring: the first CAPTURE_SNAP bytes of
 * the frame as received, with the verdict and the backend. Off (the
 * flag clear, every VIP but the one captured), the cost is a test of
 * vip->flags, the entry balance has already loaded, before and after
 * the balancer (no map lookup); not-a-VIP packets never come here.
 *
 * Why a ring buffer fed from a per-CPU scratch record: the frame is
 * copied as it arrived, before forwarding encapsulates or rewrites it,
 * and the record goes to the ring once the verdict and backend are known
 * (not at all when --backend does not match). bpf_xdp_output (a perf
 * event array) copies from the context at the moment of the call, so it
 * would give either the verdict or the original frame, not both, and
 * needs a reader per CPU. A ring reservation held across the balancer
 * would work too, but the verifier then walks the whole balancer twice
 * (with and without it): the scratch record keeps that state in a map.
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
/* capture_record.action in the scratch record, outside the XDP actions
 * (0..4) it carries in the ring: */
#define CAPTURE_NONE 0xffffffff		/* nothing pending */
#define CAPTURE_PENDING 0xfffffffe	/* sampled, waiting for the verdict */

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

/* The packet being sampled on this CPU, between capture_begin and
 * capture_end (one entry per CPU; an XDP program runs to its end on one
 * CPU). Kept in a map rather than in a register so that the verifier
 * sees one path through the balancer, not one with a sample and one
 * without. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct capture_record);
} capture_scratch SEC(".maps");

/* capture_sample copies the frame into this CPU's scratch record when the
 * filter names the VIP and its rate and lease allow; the record's action
 * says whether it did (XDP_ABORTED: pending, else nothing to send). */
static __always_inline void capture_sample(struct xdp_md *ctx, const struct packet *p, __u32 vip_index)
{
	__u32 zero = 0;
	struct capture_record *c = bpf_map_lookup_elem(&capture_scratch, &zero);
	if (!c)
		return;
	c->action = CAPTURE_NONE;
	struct capture_filter *f = bpf_map_lookup_elem(&capture_filter, &zero);
	if (!f || f->vip_index != vip_index)
		return;
	__u64 now = bpf_ktime_get_ns();
	if (now > f->expires || !rate_admit(&f->rate, now, f->interval))
		return;
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
	c->action = CAPTURE_PENDING;
}

/* capture_begin samples the packet when its VIP is being captured. */
static __always_inline void capture_begin(struct xdp_md *ctx, const struct packet *p,
					  const struct vip_value *vip)
{
	if (vip->flags & VIP_CAPTURE)
		capture_sample(ctx, p, vip->index);
}

/* capture_send completes this CPU's pending sample with the verdict (its
 * reason and XDP action) and the backend and puts it in the ring, unless
 * the capture wants another backend. */
static __always_inline void capture_send(__u32 reason, __u32 action, __u32 backend)
{
	__u32 zero = 0;
	struct capture_record *c = bpf_map_lookup_elem(&capture_scratch, &zero);
	if (!c || c->action != CAPTURE_PENDING)
		return;
	c->action = CAPTURE_NONE;
	if (c->backend && c->backend != backend)
		return;
	c->reason = reason;
	c->backend = backend;
	c->action = action;
	if (bpf_ringbuf_output(&capture_ring, c, sizeof(*c), 0) < 0) {
		c->action = CAPTURE_NONE;
		struct capture_filter *f = bpf_map_lookup_elem(&capture_filter, &zero);
		if (f)
			__sync_fetch_and_add(&f->lost, 1);
	}
	c->action = CAPTURE_NONE;
}

/* capture_end sends the packet's sample, if capture_begin took one. */
static __always_inline void capture_end(const struct vip_value *vip, __u32 reason, __u32 action, __u32 backend)
{
	if (vip->flags & VIP_CAPTURE)
		capture_send(reason, action, backend);
}

#endif
