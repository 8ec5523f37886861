/* maps.h: the balancer's maps. The Go loader sets every max_entries from
 * Options before loading; the values here are only placeholders. */
#ifndef L4LB_MAPS_H
#define L4LB_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "structs.h"

/* Virtual services: a miss means "not ours", and the packet passes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, struct vip_key);
	__type(value, struct vip_value);
} vips SEC(".maps");

/* VIP index -> the VIP's key and value (struct vip_ref), written by the
 * control plane beside vips: a conntrack hit finds its VIP here through
 * flow_state.vip, an array lookup the verifier inlines, rather than in
 * the vips hash (a helper call and a jhash). Go writes an entry before
 * the vips entry that uses its index and zeroes it when the VIP leaves
 * the index. An array entry is copied, not swapped: a packet that races
 * the write may see some fields old and some new, each one whole (they
 * are single bytes but index, which does not change in place). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct vip_ref);
} vip_refs SEC(".maps");

/* Destination ports of the VIPs, two bits per port: word port >> 5, bit
 * 2 * (port & 31) (VIP_PORT_FORWARD) when a VIP the balancer forwards for
 * uses it, the bit above (VIP_PORT_ANY) when any VIP does (guard-only
 * ones too); the port taken as it sits in the packet (network order read
 * natively). Only a packet to a forwarding port looks the conntrack up
 * before the VIP (a hit then skips the vips lookup); only a packet to a
 * port of any VIP looks vips up at all: the pass path of every other
 * port is this one inlined load. Go sets a port's bits before the vips
 * entry that needs them and clears them after the last one goes, and
 * rebuilds the map from vips at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2048);
	__type(key, __u32);
	__type(value, __u64);
} vip_ports SEC(".maps");

/* Flow -> backend. One LRU shared by all CPUs (see doc.go for why not
 * Katran's per-CPU LRUs). Under memory pressure the kernel evicts the least
 * recently used flows; an evicted flow rehashes, which Maglev keeps cheap. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DEFAULT_CT_SIZE);
	__type(key, struct flow_key);
	__type(value, struct flow_state);
} conntrack SEC(".maps");

/* VIP index -> that VIP's Maglev table: an ARRAY of backend indices whose
 * max_entries is the table size. BPF_F_INNER_MAP lets each inner map have
 * its own size; Go swaps a complete new inner map in, so a reader sees the
 * old table or the new one, never a mix, and never a size that does not
 * match the table. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(map_flags, BPF_F_INNER_MAP);
		__uint(max_entries, 1);
		__type(key, __u32);
		__type(value, __u32);
	});
} maglev SEC(".maps");

/* Backend index -> address, MAC, state. Indices are global across VIPs and
 * owned by the control plane; 0 is never a backend. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend);
} backends SEC(".maps");

/* The balancer's own addresses (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_config);
} config SEC(".maps");

/* Per-VIP counters, indexed like maglev. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct vip_counters);
} vip_stats SEC(".maps");

/* Per-backend counters, indexed like backends. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEFAULT_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend_counters);
} backend_stats SEC(".maps");

/* Global counters: one record (struct lb_counters) at key 0. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_counters);
} counters SEC(".maps");

/* Backend index -> its next hop for ipip, written by the control plane
 * from routes and neighbours (struct nexthop); read on every ipip packet
 * instead of bpf_fib_lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct nexthop);
} nexthops SEC(".maps");

/* Access lists of every VIP with one: (VIP index, client network) ->
 * allowed or denied; the longest match decides, as in l4/guard. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, DEFAULT_ACL_SIZE);
	__type(key, struct acl_key);
	__type(value, struct acl_rule);
} acl SEC(".maps");

/* SYN rate per source address ([xdp] syn_rate_per_source), shared by
 * every VIP and CPU. An LRU: a flood of spoofed sources evicts old states,
 * which only forgives those sources their past SYNs. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DEFAULT_SYN_SOURCES);
	__type(key, struct src_key);
	__type(value, struct rate_state);
} syn_sources SEC(".maps");

/* new_flow_rate state per VIP index (shared by the CPUs, see rate_state). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct rate_state);
} vip_rates SEC(".maps");

/* Anchors so that the enums reach BTF, where bpf2go finds them and emits
 * Go constants; nothing reads these. */
volatile const enum counter anchor_counter;
volatile const enum hash_key anchor_hash_key;
volatile const enum forward anchor_forward;
volatile const enum flow_flag anchor_flow_flag;
volatile const enum backend_flag anchor_backend_flag;
volatile const enum vip_flag anchor_vip_flag;
volatile const enum encap_flag anchor_encap_flag;

#endif
