// Counter reads: per VIP, per backend and global, summed over CPUs.

package bpf

import "fmt"

// VIPStats are a VIP's counters since its index was first used (counters
// are not reset when an index is reused; the control plane takes deltas).
type VIPStats struct {
	Packets  uint64 // forwarded packets
	Bytes    uint64 // forwarded frame bytes as received
	NewFlows uint64 // flows pinned (conntrack inserts and SYN rehashes)
	Drops    uint64 // packets to the VIP that were dropped (the next two included)
	// ACLDrops: packets of clients the VIP's access list refuses.
	ACLDrops uint64
	// SYNRateDrops: SYNs from sources above syn_rate_per_source.
	SYNRateDrops uint64
	// Untracked: packets of flows not in the conntrack forwarded without
	// an insert because the VIP was above its new_flow_rate.
	Untracked uint64
}

// BackendStats are a backend index's counters.
type BackendStats struct {
	Packets  uint64
	Bytes    uint64
	NewFlows uint64
}

// Counter names a global counter of the balancer (enum counter in the C).
type Counter uint32

// The global counters; GlobalStats returns them indexed by Counter.
const (
	CounterPassNotIP      = Counter(lbCounterCOUNTER_PASS_NOT_IP)
	CounterPassTruncated  = Counter(lbCounterCOUNTER_PASS_TRUNCATED)
	CounterPassBadHeader  = Counter(lbCounterCOUNTER_PASS_BAD_HEADER)
	CounterPassBadLength  = Counter(lbCounterCOUNTER_PASS_BAD_LENGTH)
	CounterPassIPOptions  = Counter(lbCounterCOUNTER_PASS_IP_OPTIONS)
	CounterPassFragment   = Counter(lbCounterCOUNTER_PASS_FRAGMENT)
	CounterPassIPv6Ext    = Counter(lbCounterCOUNTER_PASS_IPV6EXT)
	CounterPassOtherProto = Counter(lbCounterCOUNTER_PASS_OTHER_PROTO)
	CounterPassICMP       = Counter(lbCounterCOUNTER_PASS_ICMP)
	CounterPassNotVIP     = Counter(lbCounterCOUNTER_PASS_NOT_VIP)
	CounterDropNoBackend  = Counter(lbCounterCOUNTER_DROP_NO_BACKEND)
	CounterDropNoSource   = Counter(lbCounterCOUNTER_DROP_NO_SOURCE)
	CounterDropNoNeigh    = Counter(lbCounterCOUNTER_DROP_NO_NEIGH)
	CounterDropTooBig     = Counter(lbCounterCOUNTER_DROP_TOO_BIG)
	CounterDropFIB        = Counter(lbCounterCOUNTER_DROP_FIB)
	CounterDropEncap      = Counter(lbCounterCOUNTER_DROP_ENCAP)
	CounterTX             = Counter(lbCounterCOUNTER_TX)
	CounterRedirect       = Counter(lbCounterCOUNTER_REDIRECT)
	CounterICMPForwarded  = Counter(lbCounterCOUNTER_ICMP_FORWARDED)
	CounterCTHit          = Counter(lbCounterCOUNTER_CT_HIT)
	CounterCTNew          = Counter(lbCounterCOUNTER_CT_NEW)
	CounterCTStale        = Counter(lbCounterCOUNTER_CT_STALE)
	CounterCTSyn          = Counter(lbCounterCOUNTER_CT_SYN)
	CounterCTRst          = Counter(lbCounterCOUNTER_CT_RST)
	CounterCTFull         = Counter(lbCounterCOUNTER_CT_FULL)
	CounterDropACL        = Counter(lbCounterCOUNTER_DROP_ACL)
	CounterDropSYNRate    = Counter(lbCounterCOUNTER_DROP_SYN_RATE)
	CounterPassGuarded    = Counter(lbCounterCOUNTER_PASS_GUARDED)
	CounterCTUntracked    = Counter(lbCounterCOUNTER_CT_UNTRACKED)
	CounterACLEstablished = Counter(lbCounterCOUNTER_ACL_ESTABLISHED)
	CounterICMPTooBig     = Counter(lbCounterCOUNTER_ICMP_TOO_BIG)
	CounterNATNew         = Counter(lbCounterCOUNTER_NAT_NEW)
	CounterNATReclaimed   = Counter(lbCounterCOUNTER_NAT_RECLAIMED)
	CounterNATReply       = Counter(lbCounterCOUNTER_NAT_REPLY)
	CounterDropNATFull    = Counter(lbCounterCOUNTER_DROP_NAT_EXHAUSTED)
	CounterPassHandover   = Counter(lbCounterCOUNTER_PASS_HANDOVER)

	// NumCounters bounds Counter values; index 0 is never counted.
	NumCounters = int(lbCounterCOUNTER_MAX)
)

// counterNames are the metric-style names of the counters (a test checks
// that every counter the C defines has one).
var counterNames = [NumCounters]string{
	CounterPassNotIP:      "pass_not_ip",
	CounterPassTruncated:  "pass_truncated",
	CounterPassBadHeader:  "pass_bad_header",
	CounterPassBadLength:  "pass_bad_length",
	CounterPassIPOptions:  "pass_ip_options",
	CounterPassFragment:   "pass_fragment",
	CounterPassIPv6Ext:    "pass_ipv6_ext",
	CounterPassOtherProto: "pass_other_proto",
	CounterPassICMP:       "pass_icmp",
	CounterPassNotVIP:     "pass_not_vip",
	CounterDropNoBackend:  "drop_no_backend",
	CounterDropNoSource:   "drop_no_source",
	CounterDropNoNeigh:    "drop_no_neigh",
	CounterDropTooBig:     "drop_too_big",
	CounterDropFIB:        "drop_fib",
	CounterDropEncap:      "drop_encap",
	CounterTX:             "tx",
	CounterRedirect:       "redirect",
	CounterICMPForwarded:  "icmp_forwarded",
	CounterCTHit:          "conntrack_hit",
	CounterCTNew:          "conntrack_new",
	CounterCTStale:        "conntrack_stale",
	CounterCTSyn:          "conntrack_syn_rehash",
	CounterCTRst:          "conntrack_rst_delete",
	CounterCTFull:         "conntrack_update_failed",
	CounterDropACL:        "drop_acl",
	CounterDropSYNRate:    "drop_syn_rate",
	CounterPassGuarded:    "pass_guarded",
	CounterCTUntracked:    "conntrack_untracked",
	CounterACLEstablished: "acl_denied_established",
	CounterICMPTooBig:     "icmp_too_big_sent",
	CounterNATNew:         "nat_new",
	CounterNATReclaimed:   "nat_reclaimed",
	CounterNATReply:       "nat_reply",
	CounterDropNATFull:    "drop_nat_exhausted",
	CounterPassHandover:   "pass_handover",
}

func (c Counter) String() string {
	if int(c) < NumCounters && counterNames[c] != "" {
		return counterNames[c]
	}
	return fmt.Sprintf("counter(%d)", uint32(c))
}

// Counters are the global counters, indexed by Counter.
type Counters [NumCounters]uint64

// VIPStats returns the counters of VIP index i.
func (lb *LB) VIPStats(i uint32) (VIPStats, error) {
	var v lbVipCounters
	if err := sumInto(lb.percpu, lb.objs.VipStats, i, &v); err != nil {
		return VIPStats{}, fmt.Errorf("vip stats: %w", err)
	}
	return VIPStats{Packets: v.Packets, Bytes: v.Bytes, NewFlows: v.NewFlows, Drops: v.Drops,
		ACLDrops: v.AclDrops, SYNRateDrops: v.SynRateDrops, Untracked: v.Untracked}, nil
}

// BackendStats returns the counters of backend index i.
func (lb *LB) BackendStats(i uint32) (BackendStats, error) {
	var v lbBackendCounters
	if err := sumInto(lb.percpu, lb.objs.BackendStats, i, &v); err != nil {
		return BackendStats{}, fmt.Errorf("backend stats: %w", err)
	}
	return BackendStats{Packets: v.Packets, Bytes: v.Bytes, NewFlows: v.NewFlows}, nil
}

// GlobalStats returns the global counters summed over CPUs.
func (lb *LB) GlobalStats() (Counters, error) {
	var v lbLbCounters
	if err := sumInto(lb.percpu, lb.objs.Counters, 0, &v); err != nil {
		return Counters{}, fmt.Errorf("global stats: %w", err)
	}
	c := Counters(v.Reason)
	c[0] = 0 // COUNTER_NONE is never counted
	return c, nil
}
