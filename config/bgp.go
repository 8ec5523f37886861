// [bgp]: announce the VIPs to routers for ECMP across l4lb hosts.

package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BGP holds the speaker's settings ([bgp] and its [[bgp.peer]] tables).
// Every VIP address is announced as a host route while at least one VIP
// on it has an eligible backend.
type BGP struct {
	ASN      uint32     // required; 1..4294967295
	RouterID netip.Addr // required; an IPv4 address
	// NextHop of the announced routes; the zero value (the default) means
	// each session's local address.
	NextHop netip.Addr
	// Communities are standard communities "ASN:value", each stored as
	// ASN<<16 | value.
	Communities []uint32
	// HoldTime: a peer that sends nothing for this long is declared down;
	// keepalives go every third of it. Default 9s (keepalive 3s), so the
	// router sees a balancer that vanished without closing its sessions
	// within 9s; 3s..65535s (BGP's floor is 3s).
	HoldTime time.Duration
	// ConnectRetry is the wait between attempts to reach a peer; default
	// 1s (GoBGP's own default, 120s, makes recovery slow); 1s..10m.
	ConnectRetry time.Duration
	// ShutdownGrace: on SIGTERM l4lb withdraws every route, waits this
	// long for the router to move the flows, then drains; default 2s;
	// 0..5m.
	ShutdownGrace time.Duration
	Peers         []BGPPeer // at least one
}

// BGPPeer is one router l4lb dials.
type BGPPeer struct {
	Address  netip.Addr    // required; unique
	ASN      uint32        // required
	Password string        // TCP MD5 signature; "" = none
	HoldTime time.Duration // 0 = BGP.HoldTime
	Port     uint16        // default 179
	BFD      *BFD          // nil: no BFD session
}

// CommunityString formats a community as "ASN:value".
func CommunityString(c uint32) string { return fmt.Sprintf("%d:%d", c>>16, c&0xffff) }

// buildBGP resolves and checks [bgp]; nil when the file has none.
func buildBGP(p *problems, file rawTable) *BGP {
	if !file.has("bgp") {
		return nil
	}
	own := file.table("bgp")
	out := &BGP{}
	resolveKeys(newLayer(p, "", "bgp", ""), bgpKeys, own, nil, out)
	out.Peers = buildBGPPeers(p, own.tables("peer"))
	return out
}

// parseCommunity parses a standard community "ASN:value" (RFC 1997).
func parseCommunity(e any) (uint32, error) {
	s, ok := e.(string)
	if !ok {
		return 0, fmt.Errorf("must be a community such as \"65001:100\", not %s", tomlType(e))
	}
	hi, lo, ok := strings.Cut(s, ":")
	a, err1 := strconv.ParseUint(hi, 10, 16)
	b, err2 := strconv.ParseUint(lo, 10, 16)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%q must be two numbers 0..65535 as \"ASN:value\"", s)
	}
	return uint32(a)<<16 | uint32(b), nil
}

func buildBGPPeers(p *problems, raws []rawTable) []BGPPeer {
	if len(raws) == 0 {
		p.add("", "bgp.peer", "no [[bgp.peer]] table: at least one peer is required")
	}
	seen := map[netip.Addr]bool{}
	var out []BGPPeer
	for i, raw := range raws {
		l := newLayer(p, "", fmt.Sprintf("bgp.peer[%d]", i), "")
		var peer BGPPeer
		resolveKeys(l, peerKeys, raw, nil, &peer)
		peer.BFD = buildBFD(l, raw)
		if a := peer.Address; a.IsValid() && seen[a] {
			l.problem("address", "%s is already a peer", a)
			peer.Address = netip.Addr{}
		}
		seen[peer.Address] = true
		out = append(out, peer)
	}
	return out
}

// formatBGP writes [bgp] and its peers; passwords are redacted unless
// opts.ShowSecrets.
func formatBGP(w *tomlWriter, b *BGP, opts FormatOptions) {
	if b == nil {
		return
	}
	w.table("bgp")
	writeKeys(w, bgpKeys, b)
	for _, p := range b.Peers {
		if p.Password != "" && !opts.ShowSecrets {
			p.Password = Redacted
		}
		w.array("bgp.peer")
		writeKeys(w, peerKeys, &p)
		formatBFD(w, p.BFD)
	}
}

// diffBGP reports a changed [bgp] as one change: a reload applies it at
// once (peers added, removed or changed; the speaker restarts only when
// its own settings change) and keeps announcing unchanged VIPs.
func diffBGP(o, v *BGP) []Change {
	old, cur := bgpSummary(o), bgpSummary(v)
	switch {
	case old != cur:
		return []Change{{Key: "bgp", Old: old, New: cur, Effect: EffectNow}}
	case !samePasswords(o, v):
		return []Change{{Key: "bgp", Old: old, New: cur, Effect: EffectNow, Note: "a peer's password changed"}}
	}
	return nil
}

// bgpSummary is [bgp] in one line, passwords as Redacted.
func bgpSummary(b *BGP) string {
	if b == nil {
		return "(none)"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "asn %d, router_id %s, hold_time %s", b.ASN, b.RouterID, fmtDuration(b.HoldTime))
	if b.NextHop.IsValid() {
		fmt.Fprintf(&sb, ", next_hop %s", b.NextHop)
	}
	for _, c := range b.Communities {
		fmt.Fprintf(&sb, ", community %s", CommunityString(c))
	}
	fmt.Fprintf(&sb, ", connect_retry %s, shutdown_grace %s", fmtDuration(b.ConnectRetry), fmtDuration(b.ShutdownGrace))
	for _, p := range b.Peers {
		fmt.Fprintf(&sb, "; peer %s as %d port %d", p.Address, p.ASN, p.Port)
		if p.HoldTime > 0 {
			fmt.Fprintf(&sb, " hold_time %s", fmtDuration(p.HoldTime))
		}
		if p.Password != "" {
			fmt.Fprintf(&sb, " password %s", Redacted)
		}
		sb.WriteString(bfdSummary(p.BFD))
	}
	return sb.String()
}

func samePasswords(o, v *BGP) bool {
	if o == nil || v == nil {
		return o == v
	}
	pw := func(b *BGP) []string {
		out := make([]string, len(b.Peers))
		for i, p := range b.Peers {
			out[i] = p.Password
		}
		return out
	}
	return slices.Equal(pw(o), pw(v))
}
