// The keys of the high-availability tables: a BGP peer's bfd table.

package config

import "time"

// bfdKeys are the keys of a peer's bfd table.
var bfdKeys = []key[BFD]{
	{name: "interval", val: durationOf(func(b *BFD) *time.Duration { return &b.Interval }, 300*time.Millisecond, span(10*time.Millisecond, 10*time.Second)),
		reload: bgpReload,
		doc:    `The interval at which this end sends BFD packets while the session is up, and the least it asks of the router (before the session is up both send once a second). The router declares the balancer down after interval x multiplier without a packet.`},
	{name: "multiplier", val: intOf(func(b *BFD) *int { return &b.Multiplier }, 3, span[int64](1, 255)),
		reload: bgpReload,
		doc:    `Packets missed before a session is declared down (the detect multiplier).`},
}

// flowSyncKeys are the keys of [flow_sync]; Diff reports the table as one
// change (diffFlowSync).
var flowSyncKeys = []key[FlowSync]{
	{name: "listen", val: flowSyncListen(), reload: flowSyncReload, def: "(required)",
		doc: `This balancer's address and the UDP port the peers send their flows to.`},
	{name: "peers", val: flowSyncPeers(), reload: flowSyncReload, def: "(required)",
		doc: `The other balancers' listen addresses: each gets every flow this balancer pins.`},
	{name: "key", val: stringOf(func(f *FlowSync) *string { return &f.Key }, "", secret), check: checkFlowSyncKey, reload: flowSyncReload, def: "(required)",
		doc: "The secret every balancer shares, at least 16 bytes: each datagram carries an HMAC-SHA256 of it, and a datagram without a valid one is dropped and counted. `l4lb status --show-config` shows it as " + Redacted + "."},
	{name: "interval", val: durationOf(func(f *FlowSync) *time.Duration { return &f.Interval }, time.Second, span(100*time.Millisecond, time.Minute)),
		reload: flowSyncReload,
		doc:    `How often the flows that saw a packet since the last round are sent, with every live affinity pin of the proxy VIPs that have affinity_timeout. A flow or pin made less than this long before its balancer dies is not on the peers yet.`},
	{name: "max_rate", val: intOf(func(f *FlowSync) *int { return &f.MaxRate }, 50000, span[int64](1, 10_000_000)),
		reload: flowSyncReload,
		doc:    `Flows sent per second (the rest of a round waits for the next) and, apart, flows installed from peers per second (the rest are dropped and counted).`},
	{name: "max_entries", val: intOf(func(f *FlowSync) *int { return &f.MaxEntries }, 262144, span[int64](1, 1<<26)),
		reload: flowSyncReload,
		doc:    `Entries from peers the flow table may hold; past it, a peer's flows are dropped and counted. Keep it below [xdp] conntrack_size, so that the peers' flows cannot evict this balancer's own. The peers' affinity pins count against it too.`},
}

// flowSyncReload is when a reload applies a [flow_sync] change.
const flowSyncReload = "at once: the sync restarts with the new settings; the flow table keeps its entries"
