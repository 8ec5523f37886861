/* hcenc.h: the layouts tc_hc_encap shares with Go (bpf2go emits them):
 * what a health probe's socket mark selects, and the program's counters. */
#ifndef L4LB_HCENC_H
#define L4LB_HCENC_H

#include <linux/types.h>

/* Value of hc_targets, keyed by the probe socket's mark: where a probe
 * to an xdp VIP goes, the way the VIP's client packets go. Addresses in
 * the 16-byte form (IPv4 as ::ffff:a.b.c.d); the outer family is dst's. */
struct hc_target {
	__u8 dst[16];		/* the backend: outer destination (ipip) or next hop (l2) */
	__u8 src[16];		/* ipip: the outer source, the balancer's address of dst's family */
	__u32 ifindex;		/* the XDP interface: the probe leaves through it */
	__u8 forward;		/* enum hc_forward */
	__u8 pad[3];
};

/* How a probe reaches its backend: as the VIP's forward key says. */
enum hc_forward {
	HC_FORWARD_IPIP = 0,	/* encapsulated to dst, sent to the route's next hop */
	HC_FORWARD_L2 = 1,	/* unchanged (to the VIP), sent to dst's MAC */
};

/* tc_hc_encap's counters, indexed by this enum (per CPU). */
enum hc_counter {
	HC_SENT_IPIP4,		/* encapsulated in IPv4 and redirected */
	HC_SENT_IPIP6,		/* encapsulated in IPv6 and redirected */
	HC_SENT_L2,		/* redirected to the backend's MAC, unchanged */
	HC_DROP_NO_TARGET,	/* no target for the mark (a stale probe, or not a probe): dropped */
	HC_DROP_NOT_IP,		/* neither IPv4 nor IPv6: dropped */
	HC_DROP_ENCAP,		/* making room for the outer header failed: dropped */
	HC_MAX,
};

#endif
