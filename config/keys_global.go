// The keys of [global], [xdp], [bgp] and [[bgp.peer]]: one row each.

package config

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// globalKeys are the keys of [global]. Those with EffectRestart are read
// once at start (reconcile.Options, the admin and metrics servers, the
// logger's encoder).
var globalKeys = []key[Global]{
	{name: "log_level", val: enumOf(func(g *Global) *l4.LogLevel { return &g.LogLevel }, l4.LogInfo, l4.LogLevelNames()),
		effect: EffectNow,
		doc:    `The least severe level logged.`},
	{name: "log_format", val: enumOf(func(g *Global) *l4.LogFormat { return &g.LogFormat }, l4.LogConsole, l4.LogFormatNames()),
		effect: EffectRestart,
		doc:    "How log lines are written: console, text for people; json, one object a line. `l4lb run --log-format` overrides it."},
	{name: "admin_socket", val: adminSocket(), check: checkAdminSocket,
		effect: EffectRestart,
		doc:    "The Unix socket of the admin API (`l4lb status`, `reload`, `drain`...; root only): an absolute path of at most 107 bytes, or \"off\"."},
	{name: "state_file", val: stringOf(func(g *Global) *string { return &g.StateFile }, "", quoteOrNone).as(`"PATH"`).omitIf(func(g *Global) bool { return g.StateFile == "" }),
		check: checkStateFile, effect: EffectRestart, def: "none: run-time changes and health last until l4lb stops",
		doc: "A file where l4lb keeps what a restart or an upgrade must not forget (HAProxy's server-state-file): the run-time backend changes (`l4lb backend add|set|remove`), drains and disables, and which backends health took down. Written atomically on every change; read at start, where a corrupt file, or one of another host or schema, is refused with a log line and l4lb starts from the file alone. An absolute path."},
	{name: "metrics_listen", val: stringOf(func(g *Global) *string { return &g.MetricsListen }, "", offIfEmpty).as(`"HOST:PORT"`).omitIf(func(g *Global) bool { return g.MetricsListen == "" }),
		check: checkMetricsListen, effect: EffectRestart, def: "none: no metrics",
		doc: `Where Prometheus metrics are served (/metrics), such as "127.0.0.1:9370".`},
	{name: "drain_timeout", val: durationOf(func(g *Global) *time.Duration { return &g.DrainTimeout }, 30*time.Second, span(0, MaxDrainTimeout)),
		effect: EffectNow, note: "it bounds the drain of the VIPs this reload removes, of the planes its mode changes leave, and of the next shutdown",
		doc: `How long shutdown, and a reload that removes a VIP or changes its mode, wait for connections to finish before they are reset.`},
	{name: "pipe_size", val: intOf(func(g *Global) *int { return &g.PipeSize }, defaultPipeSize, span[int64](4096, 16<<20)),
		effect: EffectRestart,
		doc:    `Bytes per splice pipe (the kernel rounds up to a power of two).`},
	{name: "max_pipes", val: intOf(func(g *Global) *int { return &g.MaxPipes }, 0, span[int64](0, 1<<22)),
		effect: EffectNow,
		doc:    `Splice pipes open at once (each holds up to pipe_size bytes of kernel memory and two descriptors); past it, connections copy through a user-space buffer. 0 = half the connection limit the open-file limit allows.`},
	{name: "workers", val: intOf(func(g *Global) *int { return &g.Workers }, 0, span[int64](0, MaxWorkers)),
		effect: EffectRestart,
		doc:    `Event loops (threads) running proxied TCP connections; 0 = one per CPU the process may use.`},
	// Off by default for now (docs/operations.md, "Privileges": once, on a
	// loaded machine under the race detector, the drop took 14 s); on, a
	// compromised daemon keeps only what a reload needs.
	{name: "drop_capabilities", val: boolOf(func(g *Global) *bool { return &g.DropCapabilities }, false),
		effect: EffectRestart,
		doc:    "Once the VIPs listen and the XDP program is attached, drop every capability not needed afterwards (all threads and the bounding set; `l4lb status` lists what is kept)."},
	{name: "busy_poll", val: durationOf(func(g *Global) *time.Duration { return &g.BusyPoll }, 0, span(0, MaxBusyPoll)),
		effect: EffectNow, note: "every event loop, from its next wait",
		doc: `An event loop with nothing to do polls this long before it sleeps: lower latency on virtual machines (no vCPU wake-up per event) for CPU; 0 = sleep at once.`},
	{name: "kernel_forwarding", val: enumOf(func(g *Global) *l4.KernelFwd { return &g.KernelForwarding }, l4.KernelFwdOff, l4.GlobalKernelFwdNames()),
		effect: EffectNewFlows, note: "connections already in the kernel stay there",
		doc: "Established TCP connections of proxy VIPs are forwarded inside the kernel (a sockmap and an sk_skb program redirect each side's bytes to the other; l4lb only watches for FIN, reset and idleness): auto, when the program loads and the connection needs no byte read in user space after its start (not with app_protocol or stall_timeout); off, splice and copy in l4lb's loops. A VIP's kernel_forwarding overrides it. See docs/design.md, \"Kernel forwarding\", for what the kernel path does not do yet."},
	{name: "resolvers", val: resolversOf(),
		effect: EffectNow, note: "every backend name is looked up again at the new resolvers",
		doc: `DNS servers for named backends, tried in order (port 53 by default); [] = the nameservers of /etc/resolv.conf. /etc/hosts is read first.`},
	{name: "resolve_min", val: durationOf(func(g *Global) *time.Duration { return &g.ResolveMin }, defaultResolveMin, span(100*time.Millisecond, time.Hour)),
		effect: EffectNow, note: "from each name's next lookup",
		doc: `A backend name is looked up again after its record's TTL, at least this long after; failures retry from here, backing off.`},
	{name: "resolve_max", val: durationOf(func(g *Global) *time.Duration { return &g.ResolveMax }, defaultResolveMax, span(time.Second, 24*time.Hour)),
		check: checkResolveBounds, effect: EffectNow, note: "from each name's next lookup",
		doc: `... and at most this long after; at least resolve_min.`},
}

// xdpKeys are the keys of [xdp]. Those with EffectRestart are read when
// the XDP program loads; before that, they simply take the new value.
var xdpKeys = []key[XDP]{
	{name: "interface", val: interfacesOf(),
		check: checkXDPInterface, effect: EffectNow, def: "(required)",
		note: "interfaces added are attached, those removed detached; the others keep forwarding",
		doc: "The interface the XDP program attaches to, or a list of them: the same program runs on each (a two-arm host with clients on one and backends on another, NICs of a bond as separate interfaces), and a packet whose backend is reached through another interface leaves there (XDP_REDIRECT). " +
			"The outer source of encapsulated packets is the first listed interface's address that has one of the family."},
	{name: "attach", val: enumOf(func(x *XDP) *l4.AttachMode { return &x.Attach }, l4.AttachDriver, l4.AttachModeNames()),
		effect: EffectRestart,
		doc:    `Where the program runs: driver, in the NIC driver (native XDP); generic, after the kernel built the packet: works on any interface (lo and bridges need it), at a fraction of the speed.`},
	{name: "pin_path", val: stringOf(func(x *XDP) *string { return &x.PinPath }, "", orNone).as(`"PATH"`),
		check: checkPinPath, effect: EffectRestart,
		doc: `An absolute path on a bpffs: the maps and the program are pinned there and survive restarts; "" = not pinned.`},
	{name: "conntrack_size", val: intOf(func(x *XDP) *int { return &x.ConntrackSize }, 1<<20, span[int64](1024, 1<<26)),
		effect: EffectRestart,
		doc:    `Flows the XDP flow table holds (an LRU, about 120 bytes each); size it at twice the peak of concurrent flows.`},
	{name: "weight_refresh", val: durationOf(func(x *XDP) *time.Duration { return &x.WeightRefresh }, 5*time.Second, span(time.Second, time.Hour)),
		effect: EffectNow,
		doc:    `How often least_conn and least_time xdp VIPs turn live flows and RTTs into Maglev weights.`},
	{name: "syn_rate_per_source", val: intOf(func(x *XDP) *int { return &x.SYNRatePerSource }, 0, span[int64](0, 10_000_000)),
		effect: EffectNow, note: "every SYN from then on",
		doc: `TCP SYNs a second one source address may send to any VIP (proxy VIPs too); more are dropped in XDP before they cost the kernel a socket; 0 = off.`},
	{name: "source_prefix4", val: sourcePrefixOf(func(x *XDP) *netip.Prefix { return &x.SourcePrefix4 }, false),
		effect: EffectNow, note: "every packet from then on: a flow's outer source changes once", def: "none: the interface's own address",
		doc: `ipip and gue VIPs: the outer IPv4 source of each flow is an address of this network picked by the flow's hash, so that a backend's NIC spreads the flows over its receive queues (one fixed source puts them all on one). The balancer need not have these addresses and nothing answers to them; backends need rp_filter off (they do for DSR already).`},
	{name: "source_prefix6", val: sourcePrefixOf(func(x *XDP) *netip.Prefix { return &x.SourcePrefix6 }, true),
		effect: EffectNow, note: "every packet from then on: a flow's outer source changes once", def: "none: the interface's own address",
		doc: `The same for IPv6 outer headers: a /64 or longer network.`},
	{name: "gue_port", val: intOf(func(x *XDP) *int { return &x.GUEPort }, 6080, span[int64](1, 65535)),
		effect: EffectNow, note: "every packet from then on: backends must strip GUE on the new port first",
		doc: "The UDP destination port of forward = \"gue\" VIPs (the backends' `l4lb decap attach --gue-port`)."},
	{name: "nat_source4", val: natSource(func(x *XDP) *netip.Addr { return &x.NATSource4 }, true),
		effect: EffectRestart, def: "the interface's primary IPv4 address",
		doc: `The source address forward = "nat" VIPs give IPv4 flows towards their backends: an address of this balancer, which the backends route back through it (never a VIP's address).`},
	{name: "nat_source6", val: natSource(func(x *XDP) *netip.Addr { return &x.NATSource6 }, false),
		effect: EffectRestart, def: "the interface's primary IPv6 address",
		doc: `nat_source4 for IPv6 flows.`},
	{name: "nat_port_min", val: intOf(func(x *XDP) *uint16 { return &x.NATPortMin }, 1024, span[int64](1, 65535)),
		effect: EffectRestart,
		doc:    `The lowest source port of NAT flows. Each port is held by one flow per backend address and port at a time; keep the range clear of the kernel's ephemeral ports (net.ipv4.ip_local_port_range), which the balancer's own connections use.`},
	{name: "nat_port_max", val: intOf(func(x *XDP) *uint16 { return &x.NATPortMax }, 32767, span[int64](1, 65535)),
		check: checkNATPorts, effect: EffectRestart,
		doc: `The highest source port of NAT flows, at least nat_port_min. When every port tried for a new flow is held, the flow is dropped (counter drop_nat_exhausted), never given a port in use.`},
	{name: "nat_tcp_timeout", val: durationOf(func(x *XDP) *time.Duration { return &x.NATTCPTimeout }, 3*time.Hour, span(10*time.Second, 7*24*time.Hour)),
		effect: EffectRestart,
		doc:    `How long a TCP NAT mapping may idle before a new flow may take its port (one that saw a FIN or RST: 60s). Keep it above the clients' TCP keepalive interval (Linux: 2h).`},
	{name: "nat_udp_timeout", val: durationOf(func(x *XDP) *time.Duration { return &x.NATUDPTimeout }, 30*time.Second, span(time.Second, time.Hour)),
		effect: EffectRestart,
		doc:    `How long a UDP NAT mapping may idle before a new flow may take its port.`},
}

// bgpReload is when a reload applies a [bgp] change: Diff reports the
// table as one change (diffBGP).
const bgpReload = "at once: peers are added, removed or changed, and the speaker restarts only when its own settings change; unchanged VIPs stay announced"

// bgpKeys are the keys of [bgp].
var bgpKeys = []key[BGP]{
	{name: "asn", val: asnOf(func(b *BGP) *uint32 { return &b.ASN }), reload: bgpReload, def: "(required)",
		doc: `This balancer's AS number (the same on every balancer).`},
	{name: "router_id", val: routerID(), reload: bgpReload, def: "(required)",
		doc: `An IPv4 address that names this speaker.`},
	{name: "next_hop", val: nextHop(), reload: bgpReload, def: "each session's local address",
		doc: `The next hop of the announced routes.`},
	{name: "communities", val: communities(), reload: bgpReload, def: "[]",
		doc: `Standard communities on every route.`},
	{name: "hold_time", val: durationOf(func(b *BGP) *time.Duration { return &b.HoldTime }, 9*time.Second, span(3*time.Second, 65535*time.Second)),
		reload: bgpReload,
		doc:    `A peer that sends nothing this long is declared down; keepalives go every third of it. A balancer that dies without closing its sessions is seen after this long.`},
	{name: "connect_retry", val: durationOf(func(b *BGP) *time.Duration { return &b.ConnectRetry }, time.Second, span(time.Second, 10*time.Minute)),
		reload: bgpReload,
		doc:    `The wait between attempts to reach a peer.`},
	{name: "shutdown_grace", val: durationOf(func(b *BGP) *time.Duration { return &b.ShutdownGrace }, 2*time.Second, span(0, 5*time.Minute)),
		reload: bgpReload,
		doc:    `On SIGTERM every route is withdrawn, then l4lb waits this long for the router to move the flows before it drains.`},
	{name: "peer", val: subTable[BGP]("[[bgp.peer]]", nil, func(dst, src *BGP) { dst.Peers = src.Peers }), reload: bgpReload,
		doc: `The routers l4lb dials, at least one.`},
}

// peerKeys are the keys of a [[bgp.peer]] table.
var peerKeys = []key[BGPPeer]{
	{name: "address", val: peerAddress(), reload: bgpReload, def: "(required)",
		doc: `The router's IP address; unique.`},
	{name: "asn", val: asnOf(func(p *BGPPeer) *uint32 { return &p.ASN }), reload: bgpReload, def: "(required)",
		doc: `The router's AS number.`},
	{name: "password", val: stringOf(func(p *BGPPeer) *string { return &p.Password }, "", secret).omitIf(func(p *BGPPeer) bool { return p.Password == "" }),
		reload: bgpReload, def: "none",
		doc: "The TCP MD5 signature's key (RFC 2385). `l4lb status --show-config` shows it as " + Redacted + "."},
	{name: "hold_time", val: durationOf(func(p *BGPPeer) *time.Duration { return &p.HoldTime }, 0, span(3*time.Second, 65535*time.Second)).omitIf(func(p *BGPPeer) bool { return p.HoldTime <= 0 }),
		reload: bgpReload, def: "[bgp] hold_time",
		doc: `hold_time for this peer.`},
	{name: "port", val: intOf(func(p *BGPPeer) *uint16 { return &p.Port }, 179, span[int64](1, 65535)), reload: bgpReload,
		doc: `The router's BGP port.`},
	{name: "bfd", val: subTable[BGPPeer]("[bgp.peer.bfd]", nil, func(dst, src *BGPPeer) { dst.BFD = src.BFD }), reload: bgpReload, def: "none: no BFD",
		doc: "A BFD session with the router beside the BGP session, such as `bfd = { interval = \"100ms\", multiplier = 3 }`: the router's BGP protocol must have BFD on (BIRD: `bfd on`); it then drops this balancer's routes within interval x multiplier of the balancer going silent, and l4lb resets the BGP session when BFD goes down."},
}

// checkStateFile: state_file is an absolute path.
func checkStateFile(l *layer, g *Global) {
	if g.StateFile != "" && !strings.HasPrefix(g.StateFile, "/") {
		l.problem("state_file", "%q must be an absolute path", g.StateFile)
		g.StateFile = ""
	}
}

// adminSocket is admin_socket: "off" is "" in the Config.
func adminSocket() keyValue[Global] {
	v := stringOf(func(g *Global) *string { return &g.AdminSocket }, defaultAdminSocket, offIfEmpty).as(`"PATH" | "off"`)
	v.toml = func(g *Global) string { return quoteTOML(offIfEmpty(g.AdminSocket)) }
	return v
}

// checkAdminSocket checks admin_socket and turns "off" into "".
func checkAdminSocket(l *layer, g *Global) {
	switch path := g.AdminSocket; {
	case path == "off":
		g.AdminSocket = ""
	case !strings.HasPrefix(path, "/"):
		l.problem("admin_socket", "%q must be an absolute path, or \"off\"", path)
		g.AdminSocket = defaultAdminSocket
	case len(path) > maxUnixSocketPath:
		l.problem("admin_socket", "is %d bytes long; a Unix socket path holds at most %d", len(path), maxUnixSocketPath)
		g.AdminSocket = defaultAdminSocket
	}
}

func checkMetricsListen(l *layer, g *Global) {
	if g.MetricsListen != "" && !isHostPort(g.MetricsListen) {
		l.problem("metrics_listen", "%q is not host:port (such as 127.0.0.1:9370 or [::1]:9370)", g.MetricsListen)
		g.MetricsListen = ""
	}
}

func checkResolveBounds(l *layer, g *Global) {
	if g.ResolveMin > g.ResolveMax {
		l.problem("resolve_min", "%s is above resolve_max %s", fmtDuration(g.ResolveMin), fmtDuration(g.ResolveMax))
		g.ResolveMin, g.ResolveMax = defaultResolveMin, defaultResolveMax
	}
}

// resolversOf is resolvers: addresses, port 53 by default.
func resolversOf() keyValue[Global] {
	return keyValue[Global]{
		resolve: func(l *layer, key string, own, _ rawTable, g *Global) {
			g.Resolvers = nil
			raw := value(l, key, get[[]any](own, key), opt[[]any]{}, nil, "an array of addresses")
			l.eachString(key, raw, `an address such as "198.18.0.53" or "198.18.0.53:53"`, func(i int, s string) {
				if ap, err := parseResolver(s); err != nil {
					l.problem(key, "[%d] %v", i, err)
				} else {
					g.Resolvers = append(g.Resolvers, ap)
				}
			})
		},
		text: func(g *Global) string { return addrList(g.Resolvers) },
		toml: func(g *Global) string { return addrList(g.Resolvers) },
		copy: func(dst, src *Global) { dst.Resolvers = src.Resolvers },
		form: `["IP" | "IP:PORT", ...]`,
	}
}

func checkXDPInterface(l *layer, x *XDP) {
	if !l.has("interface") {
		l.problem("interface", "is required: the interface the XDP program attaches to")
		return
	}
	if l.ok("interface") && len(x.Interfaces) == 0 {
		l.problem("interface", "must name at least one interface")
	}
	for i, name := range x.Interfaces {
		switch {
		case !validIfName(name):
			l.problem("interface", "%q is not an interface name (1 to 15 bytes, no /, : or spaces)", name)
		case slices.Contains(x.Interfaces[:i], name):
			l.problem("interface", "lists %q twice", name)
		}
	}
}

// interfacesOf is [xdp] interface: one name, or an array of names.
// Interface is the first (the outer source's), Interfaces all of them.
func interfacesOf() keyValue[XDP] {
	return keyValue[XDP]{
		resolve: func(l *layer, key string, own, _ rawTable, x *XDP) {
			v := pick(l, key, get[any](own, key), opt[any]{})
			switch raw := v.val.(type) {
			case nil:
			case string:
				x.Interfaces = []string{raw}
			case []any:
				l.eachString(key, raw, "an interface name", func(_ int, s string) { x.Interfaces = append(x.Interfaces, s) })
			default:
				l.problem(key, "must be an interface name or an array of them, not %s", tomlType(raw))
			}
			if len(x.Interfaces) > 0 {
				x.Interface = x.Interfaces[0]
			}
		},
		text: func(x *XDP) string {
			if len(x.Interfaces) == 0 {
				return "(none)"
			}
			return strings.Join(x.Interfaces, ", ")
		},
		toml: func(x *XDP) string {
			if len(x.Interfaces) == 1 {
				return quoteTOML(x.Interfaces[0])
			}
			return stringList(x.Interfaces)
		},
		copy: func(dst, src *XDP) { dst.Interface, dst.Interfaces = src.Interface, slices.Clone(src.Interfaces) },
		form: `"IFNAME" | ["IFNAME", ...]`,
	}
}

func checkPinPath(l *layer, x *XDP) {
	if x.PinPath != "" && !strings.HasPrefix(x.PinPath, "/") {
		l.problem("pin_path", "%q must be an absolute path", x.PinPath)
	}
}

// asnOf is a required AS number, 1..4294967295.
func asnOf[S any](f func(*S) *uint32) keyValue[S] {
	v := intOf(f, 0, span[int64](0, 1<<32-1))
	n := v.resolve
	v.resolve = func(l *layer, key string, own, def rawTable, s *S) {
		n(l, key, own, def, s)
		if !l.has(key) {
			l.problem(key, "is required: an AS number")
		} else if *f(s) == 0 && l.ok(key) {
			l.problem(key, "must be 1..4294967295")
		}
	}
	v.rule = "1..4294967295"
	return v
}

// routerID is the required IPv4 router_id.
func routerID() keyValue[BGP] {
	return keyValue[BGP]{
		resolve: func(l *layer, key string, own, _ rawTable, b *BGP) {
			if rid := l.str(key, get[string](own, key), opt[string]{}, ""); rid == "" {
				l.problem(key, "is required: an IPv4 address that names this speaker")
			} else if a, err := netip.ParseAddr(rid); err != nil || !a.Is4() {
				l.problem(key, "%q must be an IPv4 address", rid)
			} else {
				b.RouterID = a
			}
		},
		toml: func(b *BGP) string { return quoteTOML(b.RouterID.String()) },
		copy: func(dst, src *BGP) { dst.RouterID = src.RouterID },
		form: `"IPV4"`,
	}
}

// nextHop is the optional next_hop address.
func nextHop() keyValue[BGP] {
	return keyValue[BGP]{
		resolve: func(l *layer, key string, own, _ rawTable, b *BGP) {
			if nh := l.str(key, get[string](own, key), opt[string]{}, ""); nh != "" {
				a, err := netip.ParseAddr(nh)
				if err != nil || a.Zone() != "" || a.IsUnspecified() {
					l.problem(key, "%q must be an IP address", nh)
				}
				b.NextHop = a.Unmap()
			}
		},
		toml: func(b *BGP) string { return quoteTOML(b.NextHop.String()) },
		omit: func(b *BGP) bool { return !b.NextHop.IsValid() },
		copy: func(dst, src *BGP) { dst.NextHop = src.NextHop },
		form: `"IP"`,
	}
}

// sourcePrefixOf is [xdp] source_prefix4/6: a network of the family
// (IPv6: /64 or longer), host bits clear, or absent.
func sourcePrefixOf(f func(*XDP) *netip.Prefix, v6 bool) keyValue[XDP] {
	want, form := `an IPv4 network such as "198.18.200.0/24"`, `"IPV4/LEN"`
	if v6 {
		want, form = `an IPv6 network of /64 or longer such as "2001:db8:200::/64"`, `"IPV6/LEN"`
	}
	return keyValue[XDP]{
		resolve: func(l *layer, key string, own, _ rawTable, x *XDP) {
			s := l.str(key, get[string](own, key), opt[string]{}, "")
			if s == "" {
				return
			}
			p, err := netip.ParsePrefix(s)
			switch {
			case err != nil || p.Addr().Is6() != v6 || p.Addr().Is4In6() || p.Addr().IsUnspecified() || v6 && p.Bits() < 64:
				l.problem(key, "%q must be %s", s, want)
			case p != p.Masked():
				l.problem(key, "%q has host bits set (did you mean %q?)", s, p.Masked().String())
			default:
				*f(x) = p
			}
		},
		text: func(x *XDP) string { return prefixText(*f(x)) },
		toml: func(x *XDP) string { return quoteTOML(prefixText(*f(x))) },
		omit: func(x *XDP) bool { return !f(x).IsValid() },
		copy: func(dst, src *XDP) { *f(dst) = *f(src) },
		form: form,
	}
}

// prefixText is p as the config writes it ("" for none).
func prefixText(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	return p.String()
}

// communities is an array of standard communities.
func communities() keyValue[BGP] {
	return keyValue[BGP]{
		resolve: func(l *layer, key string, own, _ rawTable, b *BGP) {
			for i, e := range value(l, key, get[[]any](own, key), opt[[]any]{}, nil, "an array of communities") {
				c, err := parseCommunity(e)
				if err != nil {
					l.problem(key, "[%d] %v", i, err)
					continue
				}
				b.Communities = append(b.Communities, c)
			}
		},
		toml: func(b *BGP) string {
			cs := make([]string, len(b.Communities))
			for i, c := range b.Communities {
				cs[i] = CommunityString(c)
			}
			return stringList(cs)
		},
		omit: func(b *BGP) bool { return len(b.Communities) == 0 },
		copy: func(dst, src *BGP) { dst.Communities = src.Communities },
		form: `["ASN:VALUE", ...]`,
	}
}

// peerAddress is a peer's required, unique address; buildBGPPeers checks
// that it is unique.
func peerAddress() keyValue[BGPPeer] {
	return keyValue[BGPPeer]{
		resolve: func(l *layer, key string, own, _ rawTable, p *BGPPeer) {
			addr := l.str(key, get[string](own, key), opt[string]{}, "")
			a, err := netip.ParseAddr(addr)
			switch {
			case addr == "":
				l.problem(key, "is required: the peer's IP address")
			case err != nil || a.Zone() != "" || a.IsUnspecified():
				l.problem(key, "%q must be an IP address", addr)
			default:
				p.Address = a.Unmap()
			}
		},
		toml: func(p *BGPPeer) string { return quoteTOML(p.Address.String()) },
		copy: func(dst, src *BGPPeer) { dst.Address = src.Address },
		form: `"IP"`,
	}
}
