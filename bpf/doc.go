// Package bpf is l4lb's XDP fast path: two BPF programs (C beside this
// file, compiled by bpf2go into the committed *_bpfel.{go,o}), a loader
// with typed writers for every map the control plane owns, and readers for
// stats and the flow table. It knows nothing of config files: the
// reconciler translates config into the calls below.
//
// # Programs
//
// xdp_lb (lb.c) runs on the balancer's ingress interface. For a TCP or
// UDP packet to a VIP it finds the flow's backend (conntrack, else the
// VIP's Maglev table) and forwards it: IP-in-IP to the backend's address
// through the kernel FIB (XDP_TX back out of the ingress interface,
// XDP_REDIRECT to another), or, for l2 VIPs, by rewriting the destination
// MAC (XDP_TX). Backends answer clients directly (DSR). Everything else
// passes to the kernel untouched, so SSH, proxy-mode VIPs on the same
// address and neighbour discovery keep working.
//
// xdp_decap (decap.c) runs on backends: it strips an outer IPv4 (protocol
// 4 or 41) or IPv6 (next header 41 or 4) header and passes the inner
// packet to the stack, where the VIP sits on loopback. It decapsulates
// any IP-in-IP packet, whatever its outer destination, like an "external"
// ipip device: the stack then routes the inner packet by its own address.
//
// # Verdicts of xdp_lb
//
//	frame                                          verdict       counter
//	not IPv4/IPv6 (ARP, LLDP, two VLAN tags)       XDP_PASS      pass_not_ip
//	header cut off by the end of the frame         XDP_PASS      pass_truncated
//	IP version mismatch, ihl < 5, TCP doff < 5     XDP_PASS      pass_bad_header
//	IP length beyond the frame or below a header   XDP_PASS      pass_bad_length
//	IPv4 with options (ihl > 5)                    XDP_PASS      pass_ip_options
//	IPv4 fragment (MF set or offset != 0)          XDP_PASS      pass_fragment
//	IPv6 with an extension header (incl. frag)     XDP_PASS      pass_ipv6_ext
//	not TCP, UDP or ICMP                           XDP_PASS      pass_other_proto
//	ICMP other than v4 type 3 / v6 type 1 or 2,
//	  or a quote that is not v4 (no options) or
//	  v6, TCP or UDP, with 4 port bytes            XDP_PASS      pass_icmp
//	flow (or quoted flow) not in vips, and not a
//	  reply to a NAT mapping (nat.h)               XDP_PASS      pass_not_vip
//	reply to a NAT mapping, back to the client     TX/REDIRECT   nat_reply
//	nat VIP: ICMP error quoting its flow           XDP_PASS      pass_icmp
//	client refused by the VIP's access list        XDP_DROP      drop_acl
//	TCP SYN from a source above the SYN rate       XDP_DROP      drop_syn_rate
//	guard-only (proxy) VIP, guards passed, or an
//	  ICMP error quoting such a VIP's flow         XDP_PASS      pass_guarded
//	mode change xdp -> proxy (ConntrackOnly): a
//	  SYN, or a flow not in conntrack              XDP_PASS      pass_handover
//	mode change proxy -> xdp (KernelFlows): TCP,
//	  not a SYN, not in conntrack                  XDP_PASS      pass_handover
//	VIP without table, empty slot, backend
//	  missing or inactive                          XDP_DROP      drop_no_backend
//	ipip, our source address of that family unset  XDP_DROP      drop_no_source
//	ipip, FIB: no neighbour; l2: backend has no MAC XDP_DROP     drop_no_neigh
//	ipip, FIB or the backend's nexthops entry:
//	  encapsulated packet above the MTU            XDP_DROP      drop_too_big
//	ipip, FIB: anything else (no route, forwarding
//	  disabled in the namespace)                   XDP_DROP      drop_fib
//	bpf_xdp_adjust_head failed                     XDP_DROP      drop_encap
//	nat, no free port among those probed           XDP_DROP      drop_nat_exhausted
//	forwarded out of the ingress interface         XDP_TX        tx
//	forwarded to another interface                 XDP_REDIRECT  redirect
//
// "FIB" rows apply to ipip packets whose backend has no valid nexthops
// entry (see Forwarding).
//
// Every XDP_PASS leaves the frame byte for byte as it came.
//
// # Guards
//
// Before any conntrack write or backend choice (guard.h), a TCP or UDP
// packet to an entry of vips meets:
//
//   - its VIP's access list, when the entry has VIP_ACL: one LPM trie (acl)
//     holds every VIP's networks, keyed {prefixlen, VIP index, 16-byte
//     address}; prefixlen counts the index's 32 bits, so a lookup under
//     one index never matches another VIP's networks. The longest match
//     decides (l4/guard's rule: the most specific network, both ways); no
//     match is refused only with VIP_DEFAULT_DENY (there is an allow list).
//     An IPv6 network that would cover ::ffff:0:0/96 gets an implied /96
//     entry with the default verdict, since l4/guard never matches an IPv4
//     client against IPv6 networks. A VIP without an ACL costs no lookup.
//   - the per-source SYN rate (SetSYNRate), for a TCP SYN without ACK: a
//     GCRA state (one u64 theoretical arrival time) per source address in
//     an LRU hash shared by all VIPs and CPUs, a burst of a second's worth.
//     Off (0) means no map work beyond the config entry.
//
// Refused packets drop, counted globally and per VIP (drops, acl_drops,
// syn_rate_drops). ICMP errors skip the guards: their quoted client did
// not send them. A denied client's non-SYN packet to an xdp VIP whose flow
// the conntrack holds is forwarded (acl_denied_established): the flow was
// admitted before a reload denied the client, and established flows
// survive a reload as they do in nginx and HAProxy; its new connections
// are dropped. For guard-only TCP VIPs only SYNs are checked (the kernel
// owns established connections); their UDP datagrams are all checked, so
// a session of a client a reload denies ends there.
//
// Guard-only entries (VIPEntry.GuardOnly) are proxy-mode VIPs: the
// program sees their packets first, applies the guards and passes the
// rest to the kernel untouched (pass_guarded), before a refused client
// costs a socket or a SYN queue slot.
//
// A VIP whose mode a reload changes keeps its established flows on the
// old plane while they drain. Leaving xdp (VIPEntry.ConntrackOnly) the
// entry forwards only the flows its conntrack holds and passes SYNs (their
// stale entry deleted, so a reused 4-tuple goes wholly to the kernel) and
// everything else to the proxy; entering xdp (VIPEntry.KernelFlows) a TCP
// segment other than a SYN that the conntrack does not know passes to the
// kernel, where the proxy's established socket takes it. Both cost one
// flag test on every other VIP (pass_handover counts what they pass).
//
// new_flow_rate (VIPEntry.NewFlowRate) caps conntrack inserts per VIP with
// the same GCRA in vip_rates (one state per VIP index). Over it a new flow
// is still forwarded by the Maglev table, only not inserted
// (conntrack_untracked; per VIP untracked), so a spoofed flood cannot
// flush established flows out of the LRU. Katran's is_under_flood makes
// the same choice with a per-CPU one-second window against a compile-time
// rate; here the rate is per VIP, shared by the CPUs, and without a
// window edge that admits two windows' worth at once. SYN rehashes of
// existing entries and tracked flows are unaffected.
//
// The rate states are written without atomics: CPUs admitting for the
// same state at once may each pass, so a rate can be exceeded by about
// one event per racing CPU, never undercut. Good enough for a flood guard;
// exact accounting would need a lock or an atomic on every SYN.
//
// # Verdicts of xdp_decap
//
// Always XDP_PASS. An outer IPv4 header (no options, not a fragment,
// protocol 4 or 41) or IPv6 header (next header 41 or 4) followed by a
// whole inner header of that family is stripped (counters outer_v4,
// outer_v6), the L2 header (and VLAN tag) moved up, the ethertype set to
// the inner family. Everything else is passed untouched: not IP-in-IP
// (pass_not_encap), or truncated, options, fragment, bad length, inner
// version mismatch (pass_malformed), or a failed bpf_xdp_adjust_head
// (failed).
//
// ICMP errors (v4 destination unreachable, which includes fragmentation
// needed; v6 destination unreachable and packet too big) quote a packet a
// backend sent from the VIP to a client. The quoted source is the VIP,
// the quoted destination the client: the program swaps them back into the
// client's flow key, picks that flow's backend (conntrack, else Maglev,
// never inserting or refreshing) and forwards the whole ICMP packet to it
// like a data packet (counter icmp_forwarded), so PMTU discovery works for
// the backend that owns the connection.
//
// # Conntrack
//
// One LRU hash shared by all CPUs maps a flow (client and VIP address and
// port, protocol) to a backend index:
//
//   - a hit on a backend that exists and is active keeps it (last_seen
//     refreshed at most once every 64 jiffies, 256 ms at HZ=250, decided
//     by reading jiffies, not the clock; an ordinary hit writes nothing,
//     so busy flows do not keep writing the entry's cache line from
//     several CPUs; FIN marks the flow
//     closing; RST deletes the entry after forwarding);
//   - a hit on a backend that is gone or inactive is a miss;
//   - a TCP SYN without ACK always takes the Maglev choice, rewriting an
//     existing entry in place;
//   - a miss takes the Maglev choice and inserts it (not for RST).
//
// Which VIP a packet is for: a packet to a destination port that some
// forwarding (not guard-only) VIP uses (vip_ports, a 65536-bit array) looks
// its flow up first; a hit whose entry's VIP index (flow_state.vip) holds
// that very VIP in vip_refs (key and value beside vips, an array lookup
// the verifier inlines) takes the VIP from there, and the hit costs one
// hash lookup instead of two. A miss, or an entry whose index now holds
// another VIP or none, looks the VIP up in vips (and the hit re-labels
// its entry). vip_ports has a second bit per port, set when any VIP (a
// guard-only one too) uses it: only then is vips looked up at all, so a
// packet to any other port passes (or goes to the NAT reply check) after
// one inlined load and no hash lookup; a packet to a VIP port of an
// address that is no VIP pays one conntrack lookup more. SetVIP sets a
// port's bits and writes vip_refs before vips; DeleteVIP clears vip_refs
// before removing the VIP and the port's bits after.
//
// Why one shared LRU rather than Katran's per-CPU LRUs: a flow's packets
// may arrive on any CPU (RSS changes with NIC queue counts, XDP generic
// mode, IRQ affinity), and a flow pinned in one CPU's table is unknown on
// the others, where it rehashes — harmless only while the Maglev table has
// not changed, which is exactly when conntrack matters. Per-CPU LRUs also
// split capacity evenly, so one busy queue evicts early (katran#30), and
// need a table per forwarding core set up by hand. The cost is that
// inserts from all CPUs share the LRU's free lists; lookups stay lock-free.
// last_seen comes from bpf_ktime_get_coarse_ns: a tick of resolution is
// plenty for second-scale idleness and it is several times cheaper than
// bpf_ktime_get_ns.
//
// # Maglev tables and the hash
//
// maglev is an ARRAY_OF_MAPS indexed by VIP index; each inner map is an
// ARRAY of backend indices whose max_entries is the table size
// (BPF_F_INNER_MAP lets sizes differ). SetMaglev builds a complete new
// inner map and swaps it into the slot in one update, so a packet sees the
// old table or the new one, never a mix. The program reads the size from
// the inner map itself (CO-RE read of bpf_map.max_entries), so the size
// can never disagree with the table, even while a VIP changes size.
//
// The slot is balance.Slot(balance.FlowHash(&flow, key), size), computed
// bit for bit in C (hash.h; the 64x64->128 multiply is built from 32-bit
// limbs). Flow is {Src: client, Dst: VIP, Proto}; addresses are hashed in
// their 16-byte form. TestHashAgreement holds the two together on random
// flows of both families, both protocols and every hash key.
//
// # Forwarding
//
// ipip sends the packet where the backend's nexthops entry says
// (SetNextHop: the next hop's and the egress interface's MACs, the egress
// interface, the path MTU and the outer source, written by the control
// plane from the kernel's route and neighbour for the backend), with no
// helper call; an outer packet above the entry's MTU is drop_too_big, as
// the FIB would say. Without a valid entry (ClearNextHop, or never
// written) it asks bpf_fib_lookup (before moving any byte, with tot_len
// set to the encapsulated size) for the next hop of the outer packet from
// our source address (SetSource) to the backend, and counts that in
// nexthop_fib (NextHopFIB). SetBackend and DeleteBackend clear the entry
// of an index whose address changes. The outer header has TTL 64,
// no DF, id 0, the inner TOS / traffic class, a fresh checksum, protocol 4
// or 41 by the inner family (so IPv4 VIPs may have IPv6 backends and the
// reverse). A VLAN tag stays on the frame. The FIB never resolves
// neighbours: the control plane must keep backend next hops resolved
// (drop_no_neigh says when it did not), forwarding must be on for the
// backend's family on the ingress interface (else drop_fib), and the
// path to the backends needs an MTU of at least 1520 (1540 for IPv6
// outer) or clients with clamped MSS: a full-size packet is answered
// with ICMP "fragmentation needed" / "packet too big" from the VIP
// (icmp_gen.h; XDP_TX, icmp_too_big_sent; at most 1000 a second, above
// that and for ICMP errors drop_too_big).
//
// gue is the same inside UDP (GUE variant 1: the inner IP header right
// after the UDP header) to the SetEncap port, checksum 0, source port
// from the dynamic range by a hash of the flow (rss.h). With
// Encap.Prefix4/6 the outer source of ipip and gue is an address of the
// prefix chosen by that hash instead of SetSource's, so backends' NICs
// spread flows over their receive queues; a flow always gets the same
// source and port. xdp_decap strips GUE to its Decap.SetGUEPort port.
//
// # Pinning
//
// With Options.PinPath, maps are pinned under PinPath/v<version>-<hash>,
// where the hash covers every pinned map's type, flags, key and value
// layout (BTF member names, offsets, sizes): a binary with different maps
// never adopts old pins, it gets a new directory. Map sizes are not in the
// name: an existing pin with other sizes fails Load with ErrPinMismatch
// rather than dropping the conntrack table silently. XDP links are pinned
// in the same directory; Attach of a later process swaps its program into
// the pinned link (link.Update: no moment without a program), also when
// the link was pinned by an older layout, whose pins (its maps, so its
// conntrack) it then removes. Inner Maglev maps cannot be pinned; the
// pinned outer map keeps them alive.
//
// Pins are worth something only on a bpffs that outlives the process: a
// bpffs instance, and every pin in it, goes when its last mount does, and
// a mount made in a private mount namespace (ip netns exec, systemd's
// sandboxing) goes with that namespace, taking the pinned link and so the
// program off the interface. Load therefore accepts a PinPath on (or to be
// made inside) a bpffs that PID 1's mount namespace also has (the same
// superblock in /proc/1/mountinfo; without that table, a mount that is a
// slave of another namespace's), or an empty/absent directory on which it
// mounts one (mode 0700; left mounted) when that mount is the host's; else
// it refuses with the fix (mount -t bpf bpf DIR). CheckPinPath answers the
// same question without changing anything (l4lb check), and
// LinkOutlivesProcess checks it again, with the link's pin, at shutdown.
// DetachPinned takes a stopped process's link off without loading or
// mounting anything. A process that is PID 1 itself (a container's
// entrypoint) cannot tell its own namespace from the host's.
//
// # Hazards
//
//   - Backend and VIP indices are the control plane's: reusing a backend
//     index for another backend while conntrack still points at it sends
//     those flows to the new backend. PurgeBackend before reuse.
//   - DeleteBackend makes flows rehash but leaves table slots naming the
//     index: set the new Maglev tables first.
//   - Counters are never reset; an index reused by another VIP or backend
//     inherits its counts. Take deltas.
//   - XDP_TX on a veth delivers only if the peer has an XDP program, and
//     native XDP on veth needs tx checksum offload off on the sender
//     (testnet.md); real NICs have neither problem.
//   - The backend's NIC sees one outer flow (balancer to backend), so RSS
//     does not spread decapsulated traffic across its queues; use RPS on
//     backends with heavy traffic.
//   - xdp_decap is attached by netlink, not by a bpf_link, so that it
//     outlives "l4lb decap attach"; a netlink-attached program blocks
//     bpf_link attaches on that interface until DetachDecap.
//
// # Non-goals
//
// No fragment reassembly, no IPv4 options or IPv6 extension headers (the
// kernel gets them), no ICMP echo replies or generated ICMP errors, no
// SYN cookies (the guards drop, they never answer), no per-flow outer
// source addresses for backend RSS, no neighbour resolution, no logging.
package bpf
