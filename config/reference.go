// Reference: every key of the file, as the key tables declare it, for
// docs/configuration.md and a man page (config/cmd/configdoc renders it).

package config

import "github.com/l4lb/l4lb/l4"

// Section is one kind of table of the file, with its keys.
type Section struct {
	Header string // as the file writes it: "[global]", "[[vip]]"
	About  string // what the table is for
	Keys   []KeyRef
}

// KeyRef is one key as the reference shows it, in nginx's form: syntax,
// default, context, reload, and what it does.
type KeyRef struct {
	Name string
	// Form is how a value is written ("DURATION", "off" | "v1"); Rule
	// what it must be (a range such as 1ms..5m), "" when Form says it all.
	Form, Rule string
	// Default is the built-in value as TOML; DefaultNote stands for it
	// where words say it better ("the VIP's algorithm", "(required)").
	Default, DefaultNote string
	// Context lists the tables that take the key; Scope says where in
	// them it applies ("" = everywhere).
	Context []string
	Scope   string
	// Reload says when a reload applies a changed value and what else a
	// running l4lb does about it.
	Reload string
	Doc    string
	// Table: the key names a table of its own (Doc says which section).
	Table bool
}

// Reference describes every key of the file, table by table, in the
// order a file has them.
func Reference() []Section {
	throwaway := newLayer(newProblems("", nil), "", "builtin", "")
	var global Global
	resolveKeys(throwaway, globalKeys, nil, nil, &global)
	health := Health{Type: l4.CheckTCP}
	resolveKeys(throwaway, healthKeys, nil, nil, &health)
	vip := builtinVIP(l4.ModeProxy)
	var backend Backend
	resolveKeys(throwaway, backendKeys, nil, nil, &backend)
	var route Route
	resolveKeys(throwaway, routeKeys, nil, nil, &route)
	var xdp XDP
	resolveKeys(throwaway, xdpKeys, nil, nil, &xdp)
	var bgp BGP
	resolveKeys(throwaway, bgpKeys, nil, nil, &bgp)
	var peer BGPPeer
	resolveKeys(throwaway, peerKeys, nil, nil, &peer)
	var bfd BFD
	resolveKeys(throwaway, bfdKeys, nil, nil, &bfd)
	var fs FlowSync
	resolveKeys(throwaway, flowSyncKeys, nil, nil, &fs)
	return []Section{
		{Header: "[global]", About: aboutGlobal, Keys: refKeys(globalKeys, &global, nil, "[global]")},
		{Header: "[defaults]", About: aboutDefaults},
		{Header: "[[vip]]", About: aboutVIP, Keys: refKeys(vipKeys, &vip, vipContext, "[[vip]]", "[defaults]")},
		{Header: "[vip.health]", About: aboutHealth, Keys: refKeys(healthKeys, &health, nil, "[vip.health]", "[vip.route.health]", "[defaults.health]")},
		{Header: "[[vip.backend]]", About: aboutBackend, Keys: refKeys(backendKeys, &backend, nil, "[[vip.backend]]", "[[vip.route.backend]]")},
		{Header: "[[vip.route]]", About: aboutRoute, Keys: refKeys(routeKeys, &route, nil, "[[vip.route]]")},
		{Header: "[xdp]", About: aboutXDP, Keys: refKeys(xdpKeys, &xdp, nil, "[xdp]")},
		{Header: "[bgp]", About: aboutBGP, Keys: refKeys(bgpKeys, &bgp, nil, "[bgp]")},
		{Header: "[[bgp.peer]]", About: aboutPeer, Keys: refKeys(peerKeys, &peer, nil, "[[bgp.peer]]")},
		{Header: "[bgp.peer.bfd]", About: aboutBFD, Keys: refKeys(bfdKeys, &bfd, nil, "[bgp.peer.bfd]")},
		{Header: "[flow_sync]", About: aboutFlowSync, Keys: refKeys(flowSyncKeys, &fs, nil, "[flow_sync]")},
	}
}

// vipContext: [defaults] cannot set a VIP's identity, backends or routes.
func vipContext(k *key[VIP], tables []string) []string {
	if k.ownOnly {
		return tables[:1]
	}
	return tables
}

// refKeys describes the keys of table; builtin holds their built-in
// values, tables the tables that take them (context, when set, narrows
// them for a key).
func refKeys[S any](table []key[S], builtin *S, context func(k *key[S], tables []string) []string, tables ...string) []KeyRef {
	out := make([]KeyRef, 0, len(table))
	for i := range table {
		k := &table[i]
		r := KeyRef{Name: k.name, Form: k.val.form, Rule: k.val.rule, DefaultNote: k.def, Context: tables, Reload: k.reload, Doc: k.doc, Table: k.val.table}
		if k.rule != "" {
			r.Rule = k.rule
		}
		if k.def == "" && !k.val.table {
			r.Default = k.val.toml(builtin)
		}
		if context != nil {
			r.Context = context(k, tables)
		}
		if k.scope != nil {
			r.Scope = k.scope.String()
		}
		if r.Reload == "" && k.effect != "" {
			r.Reload = effectText(k.effect, k.note, "flows")
		}
		out = append(out, r)
	}
	return out
}

// What each table is for.
const (
	aboutGlobal = `Process-wide settings.`

	aboutDefaults = `Defaults for every VIP: any [[vip]] key but name, listen, protocol, ` +
		`backend and route, and a [defaults.health] table with any health check key. ` +
		`A VIP's value is its own key, else [defaults], else the built-in default. ` +
		`A key that applies only to some VIPs (udp keys, least_time keys...) is an error ` +
		`where a VIP sets it and does not apply; from [defaults] it is ignored there, ` +
		`so one [defaults] table serves every kind of VIP.`

	aboutVIP = `A virtual service: the address and port clients connect to, how it ` +
		`balances, and its backends. The VIP is known by its listen address and ` +
		`protocol: a reload that keeps them keeps the VIP, its sockets and its flows.`

	aboutHealth = `The VIP's health check, also [vip.route.health] for a route's ` +
		`backends (each key falling back on the VIP's) and [defaults.health]. ` +
		`A backend is up after rise good checks in a row and down after fall bad ` +
		`ones. The keys of one check type are ignored by the other types; send and ` +
		`send_hex are one setting, and so are expect, expect_hex and expect_regex: ` +
		`a table that sets one of them replaces the whole group from [defaults.health].`

	aboutBackend = `One backend of a VIP (or, as [[vip.route.backend]], of a route): ` +
		`at least one per VIP, each with a unique identity (its name, else its ` +
		`address) and a unique address. A VIP whose every backend is a backup is refused.`

	aboutRoute = `An SNI route of a tcp VIP in proxy mode: TLS connections whose ` +
		`ClientHello names one of its names go to its own backends. l4lb reads the ` +
		`ClientHello and never terminates TLS; the VIP's own [[vip.backend]] list is ` +
		`the default route (see sni_no_match, sni_timeout).`

	aboutXDP = `The XDP fast path: required as soon as a VIP has mode = "xdp", and ` +
		`optional to guard proxy VIPs (syn_rate_per_source, allow and deny in XDP). ` +
		`Backends of an xdp VIP answer clients directly, so their ports equal the ` +
		`VIP's; forward = "ipip" needs IP forwarding on the interface. The keys ` +
		`that need a restart are read when the XDP program loads (with the first ` +
		`config that attaches it); until then a reload applies them.`

	aboutBGP = `Announce the VIPs to routers for ECMP across l4lb hosts: every VIP ` +
		`address is a host route while at least one VIP on it has an eligible backend. ` +
		`l4lb only dials its peers; nothing listens on port 179.`

	aboutPeer = `A router l4lb dials (at least one).`

	aboutBFD = `A BFD session (RFC 5880/5881: single hop, asynchronous mode, no ` +
		`authentication) with the peer, usually written inline: ` +
		"`bfd = { interval = \"100ms\", multiplier = 3 }`" + `. Packets go from a ` +
		`source port in 49152..65535 to UDP 3784 with TTL 255, and only packets ` +
		`that arrive with TTL 255 count. When the session goes from up to down ` +
		`(not by the router's own AdminDown) l4lb resets the BGP session; the ` +
		`router, with BFD on in its BGP protocol, drops the routes as soon as it ` +
		`misses multiplier packets. A peer without the table has no BFD.`

	aboutFlowSync = `Flow-state sync between balancers (xdp VIPs): every interval, ` +
		`each balancer sends the flows it pinned in its XDP flow table that saw a packet ` +
		`since the last round (client, VIP, backend address, age) to its peers, ` +
		`in UDP datagrams of a small versioned protocol authenticated with key ` +
		`(HMAC-SHA256; a sequence number and a timestamp refuse replays). A peer ` +
		`installs each flow whose VIP it serves in xdp mode with the same backend, ` +
		`with its age, unless it has the flow; then a flow keeps its backend when ` +
		`the router moves it to that peer, even after the backend sets changed. ` +
		`Garbage, replays and flows for VIPs or backends the peer does not have ` +
		`are dropped and counted. Proxy-mode connections end in their balancer ` +
		`and cannot move: the table syncs xdp flows only.`
)
