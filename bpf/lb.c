//go:build ignore

/* lb.c: xdp_lb, the balancer. Verdicts (also in doc.go):
 *
 *   frame                                         verdict       counter
 *   --------------------------------------------  ------------  -----------------------
 *   not IPv4/IPv6 (ARP, LLDP, two VLAN tags ...)  XDP_PASS      pass_not_ip
 *   header cut off by the end of the frame        XDP_PASS      pass_truncated
 *   IP version mismatch, ihl < 5, TCP doff < 5    XDP_PASS      pass_bad_header
 *   IP length beyond the frame / below a header   XDP_PASS      pass_bad_length
 *   IPv4 with options (ihl > 5)                   XDP_PASS      pass_ip_options
 *   IPv4 fragment (MF or offset)                  XDP_PASS      pass_fragment
 *   IPv6 extension header (incl. fragment)        XDP_PASS      pass_ipv6_ext
 *   not TCP/UDP/ICMP                              XDP_PASS      pass_other_proto
 *   ICMP other than v4 type 3 / v6 type 1, 2,
 *     or quote not v4(no options)/v6 TCP/UDP      XDP_PASS      pass_icmp
 *   TCP/UDP/quoted flow not in vips (and not a
 *     reply to a NAT address:port we mapped)      XDP_PASS      pass_not_vip
 *   reply to a NAT mapping: back to the client    XDP_TX/REDIR  nat_reply (+ tx/redirect)
 *   client refused by the VIP's allow/deny        XDP_DROP      drop_acl
 *   SYN from a source over syn_rate_per_source    XDP_DROP      drop_syn_rate
 *   guard-only (proxy) VIP, guards passed; also
 *     an ICMP error quoting such a VIP's flow     XDP_PASS      pass_guarded
 *   mode change xdp -> proxy (VIP_CT_ONLY): a SYN,
 *     or a flow not in conntrack                  XDP_PASS      pass_handover
 *   mode change proxy -> xdp (VIP_KERNEL_FLOWS):
 *     TCP, not a SYN, not in conntrack            XDP_PASS      pass_handover
 *   VIP, no table / empty slot / no backend       XDP_DROP      drop_no_backend
 *   ipip, outer source of that family unset       XDP_DROP      drop_no_source
 *   ipip, FIB: neighbour unresolved; l2: no MAC   XDP_DROP      drop_no_neigh
 *   ipip, FIB or the backend's nexthops entry:
 *     encapsulated size above the MTU             XDP_TX        icmp_too_big
 *     (the frame becomes ICMP frag needed / packet
 *     too big to the client, icmp_gen.h); an ICMP
 *     error, a short packet, over 1000/s          XDP_DROP      drop_too_big
 *   ipip, FIB: anything else                      XDP_DROP      drop_fib
 *   bpf_xdp_adjust_head failed                    XDP_DROP      drop_encap
 *   nat, no free NAT port among those probed      XDP_DROP      drop_nat_exhausted
 *   nat, NAT address of that family unset         XDP_DROP      drop_no_source
 *   forwarded out of the ingress interface        XDP_TX        tx
 *   forwarded to another interface                XDP_REDIRECT  redirect
 *
 * An ipip packet goes where its backend's nexthops entry says (MACs,
 * egress, source, MTU: the control plane keeps it in step with routes and
 * neighbours); without a valid entry it asks bpf_fib_lookup ("FIB" above).
 *
 * Every XDP_PASS leaves the frame byte for byte as it came: the kernel
 * handles it (a proxy-mode VIP may share the address, SSH must work).
 * The guards (guard.h) run before any conntrack write or backend choice;
 * ICMP errors skip them (the quoted client did not send them).
 *
 * Which VIP: a packet to a port some forwarding VIP uses (vip_ports) looks
 * its flow up in the conntrack first; a hit whose vip_refs entry still
 * names the flow's VIP takes that entry and skips the vips hash. Anything
 * else (a miss, a stale entry) to a port of any VIP looks the VIP up in
 * vips; a packet to a port no VIP uses is not a VIP without a lookup. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "capture.h"
#include "conntrack.h"
#include "flow.h"
#include "forward.h"
#include "guard.h"
#include "maps.h"
#include "nat.h"
#include "stats.h"

char LICENSE[] SEC("license") = "GPL";

/* verdict maps a final counter reason onto the XDP action. */
static __always_inline int verdict(__u32 reason)
{
	if (reason == COUNTER_TX || reason == COUNTER_ICMP_TOO_BIG)
		return XDP_TX;
	if (reason == COUNTER_REDIRECT)
		return XDP_REDIRECT;
	if (reason >= COUNTER_DROP_NO_BACKEND && reason <= COUNTER_DROP_ENCAP)
		return XDP_DROP;
	if (reason == COUNTER_DROP_ACL || reason == COUNTER_DROP_SYN_RATE)
		return XDP_DROP;
	if (reason == COUNTER_DROP_NAT_EXHAUSTED)
		return XDP_DROP;
	return XDP_PASS;
}

/* lookup_vip finds the VIP the flow is for. */
static __always_inline struct vip_value *lookup_vip(const struct packet *p)
{
	struct vip_key key = {
		.port = p->flow.vip_port,
		.proto = p->flow.proto,
	};
	__builtin_memcpy(key.addr, p->flow.vip, 16);
	return bpf_map_lookup_elem(&vips, &key);
}

#define VIP_PORT_FORWARD 1	/* a forwarding VIP uses the port */
#define VIP_PORT_ANY 2		/* some VIP (guard-only too) uses it */

/* vip_port says which VIPs use the packet's destination port (vip_ports):
 * VIP_PORT_FORWARD and VIP_PORT_ANY bits. */
static __always_inline __u32 vip_port(const struct packet *p)
{
	__u32 port = p->flow.vip_port;
	__u32 word = port >> 5;
	__u64 *bits = bpf_map_lookup_elem(&vip_ports, &word);
	return bits ? (*bits >> (2 * (port & 31))) & 3 : 0;
}

/* vip_of_flow returns the VIP a conntrack entry was pinned under, from
 * vip_refs, when that entry is still the packet's VIP; else NULL. */
static __always_inline struct vip_value *vip_of_flow(const struct packet *p, const struct flow_state *st)
{
	__u32 i = st->vip;
	struct vip_ref *r = bpf_map_lookup_elem(&vip_refs, &i);
	if (!r || r->key.port != p->flow.vip_port || r->key.proto != p->flow.proto ||
	    !addr_eq(r->key.addr, p->flow.vip))
		return NULL;
	return &r->value;
}

/* handover_pass says whether a packet of a VIP whose mode a reload changes
 * belongs to the kernel, where the proxy plane serves, rather than to the
 * balancer. xdp -> proxy (VIP_CT_ONLY): every SYN (a reused 4-tuple's old
 * entry deleted, so its next segments pass too) and every flow the
 * conntrack does not hold. proxy -> xdp (VIP_KERNEL_FLOWS): a TCP segment
 * other than a SYN that the conntrack does not hold: one of the proxy's
 * established connections (the balancer pins every flow it takes from
 * its SYN on). One lookup more, only while the change drains. */
static __always_inline int handover_pass(const struct packet *p, const struct vip_value *vip)
{
	int syn = is_syn(p);

	if (vip->flags & VIP_CT_ONLY) {
		if (syn) {
			bpf_map_delete_elem(&conntrack, &p->flow);
			return 1;
		}
	} else if (syn || p->icmp || p->flow.proto != PROTO_TCP) {
		return 0;
	}
	return !bpf_map_lookup_elem(&conntrack, &p->flow);
}

/* balance_vip forwards a parsed packet for its VIP, or says why not;
 * *backend is the backend chosen (0: none). */
static __always_inline __u32 balance_vip(struct xdp_md *ctx, struct packet *p, struct vip_value *vip,
					 struct flow_state *st, int looked, __u32 *backend)
{
	if (!p->icmp) {
		__u32 g = guard(p, vip);
		if (g != COUNTER_NONE) {
			account_guard(vip->index, g);
			return g;
		}
	}
	if (vip->flags & VIP_GUARD_ONLY)
		return COUNTER_PASS_GUARDED;
	if (vip->flags & (VIP_CT_ONLY | VIP_KERNEL_FLOWS)) {
		if (handover_pass(p, vip))
			return COUNTER_PASS_HANDOVER;
		looked = 0; /* handover_pass may have deleted the entry */
	}
	if (!looked)
		st = bpf_map_lookup_elem(&conntrack, &p->flow);
	if (p->icmp && vip->forward == FORWARD_NAT)
		return COUNTER_PASS_ICMP; /* its quote names the VIP, not the backend's view */

	__u32 idx = 0;
	__u8 new_flow = 0;
	__u32 r = COUNTER_DROP_NO_BACKEND;
	struct backend *be = select_backend(p, vip, st, &idx, &new_flow);
	if (be && vip->forward == FORWARD_NAT)
		r = nat_forward(ctx, p, be, idx);
	else if (be)
		r = vip->forward == FORWARD_L2 ? forward_l2(ctx, be)
					       : forward_ipip(ctx, p, be, idx, vip->forward == FORWARD_GUE);
	account(p, vip->index, idx, r, new_flow);
	if (p->icmp && is_forwarded(r))
		count(COUNTER_ICMP_FORWARDED);
	*backend = idx;
	return r;
}

/* balance forwards a parsed packet for a VIP, or says why not; a VIP
 * being captured has its packet sampled (capture.h). */
static __always_inline __u32 balance(struct xdp_md *ctx, struct packet *p)
{
	struct flow_state *st = NULL;
	struct vip_value *vip = NULL;
	int looked = 0;
	__u32 used = vip_port(p);

	if (used & VIP_PORT_FORWARD) {
		st = bpf_map_lookup_elem(&conntrack, &p->flow);
		looked = 1;
		if (st)
			vip = vip_of_flow(p, st);
	}
	if (!vip && (used & VIP_PORT_ANY))
		vip = lookup_vip(p);
	if (!vip)
		return nat_reply(ctx, p);
	/* One copy, whichever map it came from: the verifier then walks the
	 * balancer once for both, and the packet sees one set of values. */
	struct vip_value v = *vip;
	__u32 backend = 0;
	capture_begin(ctx, p, &v);
	__u32 r = balance_vip(ctx, p, &v, st, looked, &backend);
	capture_end(&v, r, verdict(r), backend);
	return r;
}

SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	struct packet p = {};
	__u32 r = parse_packet(ctx, &p);

	if (r == COUNTER_NONE)
		r = balance(ctx, &p);
	count(r);
	return verdict(r);
}
