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
