/* structs.h: map keys, values and enums shared with Go: bpf2go emits a Go
 * type for each (map keys and values, and the enums anchored in maps.h and
 * decap.c). Go never declares these layouts by hand: change them here, run
 * go generate, and the pin directory's layout hash changes with them. */
#ifndef L4LB_STRUCTS_H
#define L4LB_STRUCTS_H

#include <linux/types.h>

/* Key of the vips map: what a packet to a virtual service matches on.
 * addr is the 16-byte form (IPv4 as ::ffff:a.b.c.d) so one map holds both
 * families; port is in network order, as it sits in the packet. */
struct vip_key {
	__u8 addr[16];
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* How a VIP balances. The Maglev table size is not stored here: it is the
 * max_entries of the VIP's inner table map, so a table and its size are
 * swapped in one atomic outer-map update. */
struct vip_value {
	__u32 index;	/* slot in maglev, vip_stats, vip_rates and the acl keys; chosen by the control plane */
	__u8 hash_key;	/* enum hash_key */
	__u8 forward;	/* enum forward */
	__u8 flags;	/* enum vip_flag */
	__u8 pad;
	__u32 new_flow_interval;	/* ns between conntrack inserts at the VIP's new_flow_rate; 0 = no cap */
};

/* An entry of vip_refs: a VIP's key and value under its index, as in
 * vips. A conntrack hit whose VIP key matches the flow's takes the value
 * from here (lb.c, vip_of_flow); any mismatch (an index reused, a VIP
 * gone) sends it to the vips lookup. */
struct vip_ref {
	struct vip_key key;
	struct vip_value value;
};

/* What the guards do for a VIP. A VIP without VIP_ACL costs no trie
 * lookup. */
enum vip_flag {
	VIP_ACL = 1,		/* look the client up in the acl trie under the VIP's index */
	VIP_DEFAULT_DENY = 2,	/* a client in no network of the ACL is refused (there is an allow list) */
	VIP_GUARD_ONLY = 4,	/* a proxy-mode VIP: ACL and SYN rate only, then XDP_PASS untouched */
	/* A reload moves the VIP between modes; the old plane keeps its
	 * established flows until they end (l4/reconcile's mode change): */
	VIP_CT_ONLY = 8,	/* xdp -> proxy: only flows in the conntrack are forwarded;
				 * SYNs (their entry deleted) and misses pass to the kernel */
	VIP_KERNEL_FLOWS = 16,	/* proxy -> xdp: a TCP segment other than a SYN that the
				 * conntrack does not hold passes (a proxy connection) */
	VIP_CAPTURE = 32,	/* l4lb xdp capture runs on the VIP: read capture_filter (capture.h) */
};

/* Key of the acl LPM trie. One trie serves every VIP: the VIP's index is
 * part of every prefix (prefixlen counts its 32 bits, then 96 + len for an
 * IPv4 network in the 16-byte form, or len for IPv6), so a lookup under
 * one index never matches another VIP's networks. */
struct acl_key {
	__u32 prefixlen;
	__u32 vip_index;	/* native order: Go writes it as the program reads it */
	__u8 addr[16];		/* 16-byte form */
};

/* Value of the acl trie: the verdict of the most specific network. */
struct acl_rule {
	__u8 allowed;	/* 1 allowed, 0 denied */
	__u8 implied;	/* 1: not a configured network but ::ffff:0:0/96 with the default
			 * verdict, written when an IPv6 network would cover IPv4 clients
			 * (l4/guard matches IPv4 clients against IPv4 networks only) */
	__u16 pad;
};

/* Key of syn_sources: a client address in the 16-byte form. */
struct src_key {
	__u8 addr[16];
};

/* A GCRA rate state: the theoretical arrival time of the next event
 * (bpf_ktime_get_coarse_ns). One word, written without atomics: two CPUs
 * admitting for the same key at once may both pass, so rates are
 * approximate (a little over, never under). */
struct rate_state {
	__u64 tat;
};

/* Which parts of a flow the Maglev hash covers; values equal Go's
 * balance.HashKey (HashSrcIP, HashSrcIPPort, HashFiveTuple). */
enum hash_key {
	HASH_SRC_IP = 0,
	HASH_SRC_IP_PORT = 1,
	HASH_FIVE_TUPLE = 2,
};

/* How a packet reaches its backend. */
enum forward {
	FORWARD_IPIP = 0,	/* IP-in-IP (v4 or v6 outer by the backend's family) */
	FORWARD_L2 = 1,		/* rewrite the destination MAC, backend on our segment */
	FORWARD_GUE = 2,	/* IP in UDP to lb_config.gue_port (GUE variant 1: the inner IP
				 * header right after the UDP header), per-flow source port */
	FORWARD_NAT = 3,	/* rewrite destination to the backend, source to a NAT address and port (nat.h) */
};

/* Key of the conntrack map: a flow as the client sent it (client to VIP),
 * addresses in the 16-byte form, ports in network order. */
struct flow_key {
	__u8 client[16];
	__u8 vip[16];
	__be16 client_port;
	__be16 vip_port;
	__u8 proto;
	__u8 pad[3];
};

/* Value of the conntrack map. */
struct flow_state {
	__u64 last_seen;	/* bpf_ktime_get_coarse_ns (CLOCK_MONOTONIC, a tick coarse), refreshed at most once per CT_REFRESH_JIFFIES */
	__u32 backend;		/* index into backends */
	__u32 flags;		/* enum flow_flag */
	__u32 touched;		/* low 32 bits of jiffies at the last refresh of last_seen: a hit
				 * compares them (one inlined load) instead of reading the clock */
	__u32 vip;		/* the VIP's index when the flow was pinned: a hit reads that VIP
				 * from vip_refs (an inlined array load) instead of the vips hash */
};

enum flow_flag {
	FLOW_FIN = 1,	/* a FIN was seen: the flow is closing and no longer counts as live */
	FLOW_SYNCED = 2,	/* written by flow sync from a peer balancer's entry, not pinned
				 * here (the program keeps it as any other; a SYN rewrites it) */
};

/* An entry of the backends array. Index 0 is reserved: "no backend". */
struct backend {
	__u8 addr[16];	/* 16-byte form */
	__u8 mac[6];	/* next hop for forward = l2 */
	__u8 family;	/* 4 or 6; 0 = empty slot */
	__u8 flags;	/* enum backend_flag */
};

enum backend_flag {
	BACKEND_ACTIVE = 1,	/* may take flows; a conntrack hit on an inactive backend rehashes */
};

/* An entry of the nexthops array, indexed like backends: where an
 * encapsulated packet to that backend goes, as the control plane read it
 * from the kernel's route and neighbour for the backend. A valid entry
 * spares the packet bpf_fib_lookup; without one (absent, or valid = 0 while
 * the neighbour is unresolved) the packet takes bpf_fib_lookup, counted in
 * lb_counters.nexthop_fib. The outer source comes from the config map on
 * both paths. */
struct nexthop {
	__u8 dmac[6];	/* the next hop's MAC (the backend's, or its gateway's) */
	__u8 smac[6];	/* the egress interface's MAC */
	__u32 ifindex;	/* egress interface */
	__u32 mtu;	/* path MTU: an outer packet above it is too big, as the FIB would say */
	__u8 valid;	/* 1: use this entry; 0: ask bpf_fib_lookup */
	__u8 pad[3];
};

/* The single entry of the config map: the balancer's own addresses, used
 * as the outer source of encapsulated packets. An all-zero address means
 * "not configured": packets needing it are dropped and counted. */
struct lb_config {
	__u8 src4[4];
	__u8 src6[16];
	__u32 syn_interval;	/* ns between admitted SYNs of one source ([xdp] syn_rate_per_source); 0 = off */
	/* [xdp] source_prefix4/6 (rss.h): with ENCAP_PREFIX4/6 set in
	 * encap_flags the outer source of a flow is prefix | (flow hash &
	 * mask) instead of src4/src6; the prefixes need not be assigned to
	 * the balancer. */
	__u8 prefix4[4];	/* network bits, host bits zero */
	__u8 mask4[4];		/* host bits set (network order) */
	__u8 prefix6[16];	/* network bits, host bits zero */
	__u8 mask6[8];		/* host bits of the low 64 bits (a prefix is /64 or longer) */
	__be16 gue_port;	/* UDP destination port of forward = gue ([xdp] gue_port) */
	__u8 encap_flags;	/* enum encap_flag */
	__u8 pad;
};

enum encap_flag {
	ENCAP_PREFIX4 = 1,	/* IPv4 outer sources from prefix4/mask4 */
	ENCAP_PREFIX6 = 2,	/* IPv6 outer sources from prefix6/mask6 */
};

/* Per-VIP counters (per CPU, summed by Go). */
struct vip_counters {
	__u64 packets;	/* forwarded (TX or redirect) */
	__u64 bytes;	/* frame bytes as received, before encapsulation */
	__u64 new_flows;	/* conntrack inserts and SYN rehashes */
	__u64 drops;	/* packets to this VIP that were dropped (the three below included) */
	__u64 acl_drops;	/* dropped by the access list */
	__u64 syn_rate_drops;	/* SYNs dropped by syn_rate_per_source */
	__u64 untracked;	/* packets of flows not in conntrack forwarded without an insert (new_flow_rate) */
};

/* Per-backend counters (per CPU, summed by Go). */
struct backend_counters {
	__u64 packets;
	__u64 bytes;
	__u64 new_flows;
};

/* Global counters, one u64 per reason in the counters per-CPU array.
 * COUNTER_NONE is never counted: parse steps return it for "go on". */
enum counter {
	COUNTER_NONE = 0,
	COUNTER_PASS_NOT_IP,		/* ethertype not IPv4/IPv6 (also a second VLAN tag) */
	COUNTER_PASS_TRUNCATED,		/* a header ends past the frame */
	COUNTER_PASS_BAD_HEADER,	/* IP version mismatch, IPv4 ihl < 5, TCP doff < 5 */
	COUNTER_PASS_BAD_LENGTH,	/* IP length field beyond the frame or below a header */
	COUNTER_PASS_IP_OPTIONS,	/* IPv4 ihl > 5 */
	COUNTER_PASS_FRAGMENT,		/* IPv4 MF or fragment offset */
	COUNTER_PASS_IPV6_EXT,		/* IPv6 extension header (incl. fragment) */
	COUNTER_PASS_OTHER_PROTO,	/* not TCP, UDP or ICMP */
	COUNTER_PASS_ICMP,		/* ICMP we do not forward (type, malformed quote) */
	COUNTER_PASS_NOT_VIP,		/* no vips entry for the destination */
	COUNTER_DROP_NO_BACKEND,	/* no table, empty slot, or backend missing/inactive */
	COUNTER_DROP_NO_SOURCE,		/* outer source address of that family unset */
	COUNTER_DROP_NO_NEIGH,		/* FIB: next hop has no resolved neighbour */
	COUNTER_DROP_TOO_BIG,		/* FIB: encapsulated packet above the egress MTU, not answered (icmp_gen.h says when) */
	COUNTER_DROP_FIB,		/* FIB: any other failure (no route, forwarding off) */
	COUNTER_DROP_ENCAP,		/* bpf_xdp_adjust_head failed */
	COUNTER_TX,			/* forwarded with XDP_TX */
	COUNTER_REDIRECT,		/* forwarded with bpf_redirect */
	COUNTER_ICMP_FORWARDED,		/* ICMP error sent to the quoted flow's backend */
	COUNTER_CT_HIT,			/* conntrack hit on a usable backend */
	COUNTER_CT_NEW,			/* conntrack miss: Maglev choice inserted */
	COUNTER_CT_STALE,		/* hit on a gone/inactive backend: rehashed */
	COUNTER_CT_SYN,			/* SYN (no ACK) rehashed over an existing entry */
	COUNTER_CT_RST,			/* RST deleted the entry */
	COUNTER_CT_FULL,		/* conntrack update failed: forwarded uncached */
	COUNTER_DROP_ACL,		/* client refused by the VIP's access list */
	COUNTER_DROP_SYN_RATE,		/* SYN from a source above syn_rate_per_source */
	COUNTER_PASS_GUARDED,		/* packet to a guard-only (proxy) VIP that passed its guards */
	COUNTER_CT_UNTRACKED,		/* flow over the VIP's new_flow_rate: forwarded, not inserted */
	COUNTER_ACL_ESTABLISHED,	/* denied client, but its flow is in conntrack (admitted before a reload): forwarded */
	COUNTER_ICMP_TOO_BIG,		/* encapsulated it would exceed the MTU: answered with ICMP frag needed / packet too big (XDP_TX) */
	COUNTER_NAT_NEW,		/* nat: a flow took a free NAT port */
	COUNTER_NAT_RECLAIMED,		/* nat: a flow took the NAT port of a mapping idle past its timeout */
	COUNTER_NAT_REPLY,		/* nat: a backend's reply rewritten back to the client and forwarded */
	COUNTER_DROP_NAT_EXHAUSTED,	/* nat: no free NAT port among the probed ones: dropped, never shared */
	COUNTER_PASS_HANDOVER,		/* left to the kernel while a VIP changes mode (VIP_CT_ONLY, VIP_KERNEL_FLOWS) */
	COUNTER_MAX,
};

/* The single entry of capture_filter: what l4lb xdp capture samples.
 * Read only for a VIP with VIP_CAPTURE; expires bounds a capture whose
 * reader died (the program stops by itself, without Go). */
struct capture_filter {
	__u64 expires;		/* bpf_ktime_get_ns after which nothing is sampled; 0 = off */
	struct rate_state rate;	/* samples admitted at most one per interval (rate.h) */
	__u64 lost;		/* samples the ring had no room for */
	__u32 vip_index;	/* the VIP sampled */
	__u32 backend;		/* keep only packets sent to this backend index; 0 = any */
	__u32 interval;		/* ns between samples (the capture's packets a second) */
	__u32 pad;
};

/* A record of capture_ring: one sampled packet, the frame as received
 * (before any encapsulation) and what the program did with it. */
struct capture_record {
	__u64 time;		/* bpf_ktime_get_ns when it was sampled */
	__u32 frame_len;	/* bytes of the frame as received */
	__u32 cap_len;		/* bytes of it in data */
	__u32 vip_index;
	__u32 backend;		/* backend index it went to (or would have); 0 = none */
	__u32 reason;		/* enum counter: the final verdict's reason */
	__u32 action;		/* the XDP action returned (XDP_TX, XDP_DROP ...) */
	__u8 data[256];		/* the frame's first cap_len bytes (CAPTURE_SNAP) */
};

/* The single entry of the counters per-CPU array: every global counter in
 * one record, so a packet finds them with one lookup wherever it counts. */
struct lb_counters {
	__u64 reason[COUNTER_MAX];	/* indexed by enum counter */
	__u64 nexthop_fib;		/* ipip packets routed by bpf_fib_lookup: no valid nexthops entry */
};

/* Value of nat_flows (keyed like conntrack, client -> VIP): the source a
 * forward = nat flow is given towards its backend. */
struct nat_mapping {
	__u8 addr[16];		/* NAT address, 16-byte form */
	__be16 port;		/* NAT port, network order */
	__u16 pad;
	__u32 backend;		/* backend index the mapping was made for */
};

/* Value of nat_reverse. Its key is a struct flow_key as the backend's
 * reply carries it: client = backend, vip = NAT address, client_port =
 * backend port, vip_port = NAT port. The entry owns that NAT port: a port
 * is given to a flow only by inserting this entry (or by taking over one
 * idle past its timeout with a compare-and-swap on last_seen). */
struct nat_reverse {
	struct flow_key flow;	/* the client -> VIP flow the reply belongs to */
	__u64 last_seen;	/* either direction, bpf_ktime_get_coarse_ns, refreshed at most once per CT_REFRESH_NS */
	__u32 flags;		/* enum nat_flag */
	__u32 backend;		/* backend index */
};

enum nat_flag {
	NAT_CLOSING = 1,	/* a FIN or RST was seen (either direction): the closed timeout applies */
};

/* The NAT settings ([xdp] nat_*), a global the program reads without a
 * map lookup; Go writes it. enabled = 0 (no forward = nat VIP) keeps the
 * reply check off the path of packets that are not for a VIP. */
struct nat_config {
	__u8 addr6[16];		/* NAT source of IPv6 flows; zero = none */
	__u8 addr4[4];		/* NAT source of IPv4 flows; zero = none */
	__u16 port_lo;		/* NAT ports, host order, port_lo <= port_hi */
	__u16 port_hi;
	__u32 enabled;
	__u32 pad;
	__u64 tcp_timeout;	/* ns a TCP mapping may idle before its port is taken */
	__u64 udp_timeout;	/* ns for UDP */
	__u64 closed_timeout;	/* ns for a TCP mapping that saw a FIN or RST */
};

/* Decap program counters, one u64 per reason in decap_counters. */
enum decap_counter {
	DECAP_NONE = 0,
	DECAP_OUTER_V4,		/* stripped an outer IPv4 header */
	DECAP_OUTER_V6,		/* stripped an outer IPv6 header */
	DECAP_PASS_NOT_ENCAP,	/* not IP-in-IP: passed untouched */
	DECAP_PASS_MALFORMED,	/* truncated, options, fragment, bad length: passed untouched */
	DECAP_FAILED,		/* bpf_xdp_adjust_head failed: passed untouched */
	DECAP_GUE_V4,		/* stripped an outer IPv4 + UDP header (GUE to decap_config.gue_port) */
	DECAP_GUE_V6,		/* stripped an outer IPv6 + UDP header (GUE to decap_config.gue_port) */
	DECAP_MAX,
};

/* The single entry of the decap program's decap_config map. */
struct decap_config {
	__be16 gue_port;	/* UDP port whose IP-in-UDP (GUE variant 1) is stripped; 0 = none */
	__u16 pad;
};

#endif
