/* consts.h: protocol numbers, hash constants and tunables of the XDP programs. */
#ifndef L4LB_CONSTS_H
#define L4LB_CONSTS_H

#include <linux/types.h>

/* Ethernet types we parse. 802.1ad (QinQ outer) is accepted as a single tag:
 * a second tag makes the frame "not IP" and it passes. */
#ifndef ETH_P_IP
#define ETH_P_IP 0x0800
#endif
#ifndef ETH_P_IPV6
#define ETH_P_IPV6 0x86DD
#endif
#ifndef ETH_P_8021Q
#define ETH_P_8021Q 0x8100
#endif
#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#ifndef ETH_HLEN
#define ETH_HLEN 14
#endif
#define VLAN_HLEN 4

/* IP protocol numbers (the UAPI enum is awkward to use in switch on u8). */
#define PROTO_HOPOPTS 0
#define PROTO_ICMP 1
#define PROTO_IPIP 4
#define PROTO_TCP 6
#define PROTO_UDP 17
#define PROTO_IPV6 41
#define PROTO_ROUTING 43
#define PROTO_FRAGMENT 44
#define PROTO_ESP 50
#define PROTO_AH 51
#define PROTO_ICMPV6 58
#define PROTO_NONE 59
#define PROTO_DSTOPTS 60
#define PROTO_MH 135
#define PROTO_HIP 139
#define PROTO_SHIM6 140

/* ICMP types that quote a packet we may have forwarded. */
#ifndef ICMP_DEST_UNREACH
#define ICMP_DEST_UNREACH 3
#endif
#ifndef ICMPV6_DEST_UNREACH
#define ICMPV6_DEST_UNREACH 1
#endif
#ifndef ICMPV6_PKT_TOOBIG
#define ICMPV6_PKT_TOOBIG 2
#endif

/* IPv4 frag_off bits (host order). */
#ifndef IP_MF
#define IP_MF 0x2000
#endif
#ifndef IP_OFFSET
#define IP_OFFSET 0x1FFF
#endif

#define TH_FIN 0x01
#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_ACK 0x10

#define IPV4_HLEN 20
#define IPV6_HLEN 40

/* Outer header TTL / hop limit of encapsulated packets. */
#define OUTER_TTL 64

/* A conntrack hit rewrites last_seen only when its jiffies stamp is this
 * many ticks old (64 ms at HZ=1000, 256 ms at HZ=250, 640 ms at HZ=100):
 * an ordinary hit reads jiffies (inlined, no clock call) and writes
 * nothing, which keeps the entry's cache line shared across CPUs. Flow
 * counting (bpf.LB.FlowCounts) uses idle cutoffs of many seconds. */
#define CT_REFRESH_JIFFIES 64

/* NAT mappings (nat.h) refresh their last_seen at most once per this. */
#define CT_REFRESH_NS 1000000000ULL

/* Default map sizes; the Go loader always overrides them from Options. */
#define DEFAULT_MAX_VIPS 512
#define DEFAULT_MAX_BACKENDS 4096
#define DEFAULT_CT_SIZE 65536
#define DEFAULT_ACL_SIZE 65536
#define DEFAULT_SYN_SOURCES 65536

/* The GCRA burst of the rate guards: one second's worth of events. */
#define RATE_BURST_NS 1000000000ULL

/* Flow hash constants: must equal l4/balance/hash.go bit for bit (the Go
 * tests compare the program's choice with balance.FlowHash on random flows,
 * so a drift fails the build). */
#define HASH_GOLDEN 0x9e3779b97f4a7c15ULL
#define LANE_SRC_HI 0xa0761d6478bd642fULL
#define LANE_SRC_LO 0xe7037ed1a0b428dbULL
#define LANE_PORT 0x8ebc6af09c88c6e3ULL
#define LANE_DST_HI 0x589965cc75374cc3ULL
#define LANE_DST_LO 0x1d8e4e27c47d124fULL
#define LANE_MIX 0xc2b2ae3d27d4eb4fULL
#define LANE_FINAL 0x27d4eb2f165667c5ULL

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

#endif
