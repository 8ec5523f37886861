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
}

// CommunityString formats a community as "ASN:value".
func CommunityString(c uint32) string { return fmt.Sprintf("%d:%d", c>>16, c&0xffff) }

func buildBGP(p *problems, x *rawBGP) *BGP {
	if x == nil {
		return nil
	}
	l := newLayer(p, "", "bgp", "")
	var none opt[string]
	out := &BGP{
		ASN:           asn(l, "asn", x.ASN),
		HoldTime:      l.duration("hold_time", x.HoldTime, none, 9*time.Second, span(3*time.Second, 65535*time.Second)),
		ConnectRetry:  l.duration("connect_retry", x.ConnectRetry, none, time.Second, span(time.Second, 10*time.Minute)),
		ShutdownGrace: l.duration("shutdown_grace", x.ShutdownGrace, none, 2*time.Second, span(0, 5*time.Minute)),
	}
	if rid := l.str("router_id", x.RouterID, none, ""); rid == "" {
		l.problem("router_id", "is required: an IPv4 address that names this speaker")
	} else if a, err := netip.ParseAddr(rid); err != nil || !a.Is4() {
		l.problem("router_id", "%q must be an IPv4 address", rid)
	} else {
		out.RouterID = a
	}
	if nh := l.str("next_hop", x.NextHop, none, ""); nh != "" {
		a, err := netip.ParseAddr(nh)
		if err != nil || a.Zone() != "" || a.IsUnspecified() {
			l.problem("next_hop", "%q must be an IP address", nh)
		}
		out.NextHop = a.Unmap()
	}
	for i, e := range value(l, "communities", x.Communities, opt[[]any]{}, nil, "an array of communities") {
		c, err := parseCommunity(e)
		if err != nil {
			l.problem("communities", "[%d] %v", i, err)
			continue
		}
		out.Communities = append(out.Communities, c)
	}
	out.Peers = buildBGPPeers(p, x.Peers)
	return out
}

func asn(l *layer, key string, v opt[int64]) uint32 {
	n := l.integer(key, v, opt[int64]{}, 0, span[int64](0, 1<<32-1))
	if !l.has(key) {
		l.problem(key, "is required: an AS number")
	} else if n == 0 && l.ok(key) {
		l.problem(key, "must be 1..4294967295")
	}
	return uint32(n)
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

func buildBGPPeers(p *problems, raws []rawBGPPeer) []BGPPeer {
	if len(raws) == 0 {
		p.add("", "bgp.peer", "no [[bgp.peer]] table: at least one peer is required")
	}
	seen := map[netip.Addr]bool{}
	var out []BGPPeer
	for i := range raws {
		l := newLayer(p, "", fmt.Sprintf("bgp.peer[%d]", i), "")
		r := &raws[i]
		var none opt[string]
		peer := BGPPeer{
			ASN:      asn(l, "asn", r.ASN),
			Password: l.str("password", r.Password, none, ""),
			HoldTime: l.duration("hold_time", r.HoldTime, none, 0, span(3*time.Second, 65535*time.Second)),
			Port:     uint16(l.integer("port", r.Port, opt[int64]{}, 179, span[int64](1, 65535))),
		}
		addr := l.str("address", r.Address, none, "")
		a, err := netip.ParseAddr(addr)
		switch {
		case addr == "":
			l.problem("address", "is required: the peer's IP address")
		case err != nil || a.Zone() != "" || a.IsUnspecified():
			l.problem("address", "%q must be an IP address", addr)
		case seen[a.Unmap()]:
			l.problem("address", "%s is already a peer", a.Unmap())
		default:
			peer.Address = a.Unmap()
			seen[peer.Address] = true
		}
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
	w.int("asn", int(b.ASN))
	w.str("router_id", b.RouterID.String())
	if b.NextHop.IsValid() {
		w.str("next_hop", b.NextHop.String())
	}
	if len(b.Communities) > 0 {
		cs := make([]string, len(b.Communities))
		for i, c := range b.Communities {
			cs[i] = CommunityString(c)
		}
		w.raw("communities", stringList(cs))
	}
	w.dur("hold_time", b.HoldTime)
	w.dur("connect_retry", b.ConnectRetry)
	w.dur("shutdown_grace", b.ShutdownGrace)
	for _, p := range b.Peers {
		w.array("bgp.peer")
		w.str("address", p.Address.String())
		w.int("asn", int(p.ASN))
		if p.Password != "" {
			pw := Redacted
			if opts.ShowSecrets {
				pw = p.Password
			}
			w.str("password", pw)
		}
		if p.HoldTime > 0 {
			w.dur("hold_time", p.HoldTime)
		}
		w.int("port", int(p.Port))
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
