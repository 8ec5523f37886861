// The keys of a [[vip.backend]] and a [[vip.route]] table: one row each.

package config

import (
	"strings"

	"github.com/l4lb/l4lb/l4"
)

// backendReload is when a reload applies a backend's change: Diff
// reports each backend apart (backendChanges), with what happens to its
// flows.
const backendReload = "new flows; a new address or name makes it a new backend (health unknown, counters from 0) and the old one leaves as if removed"

// backendKeys are the keys of a [[vip.backend]] table, in the order
// Format writes them.
var backendKeys = []key[Backend]{
	{name: "name", val: backendName(), reload: backendReload, def: "(none: the address is the identity)",
		doc: `Names the backend in status, metrics and the admin verbs (drain, disable and enable take a name or an address); its identity is its name, else its address. Not an IP address.`},
	{name: "address", val: backendAddress(), reload: backendReload, def: "(required, or srv)",
		doc: "The backend, ip:port; or name:port, a DNS name whose A/AAAA records give one backend each, looked up again after their TTL. In mode xdp its port is the VIP's."},
	{name: "srv", val: backendSRV(), reload: backendReload, def: "(none)",
		doc: `Instead of address: an SRV name whose records give the backends, targets and ports; the lowest priority's targets are primaries, the others backups. Mode proxy only.`},
	{name: "weight", val: intOf(func(b *Backend) *int { return &b.Weight }, 100, span[int64](0, 1000)),
		reload: "new flows; 0 drains: no new flows, established ones continue (UDP sessions move on their next datagram)",
		doc:    `The backend's share of new flows; 0 = drain.`},
	{name: "backup", val: boolOf(func(b *Backend) *bool { return &b.Backup }, false).omitIf(func(b *Backend) bool { return !b.Backup }),
		reload: "new flows",
		doc:    `The backend takes new flows only while no primary (non-backup) backend of the VIP is eligible (see backup_mode).`},
	{name: "max_conns", val: intOf(func(b *Backend) *int { return &b.MaxConns }, 0, span[int64](0, 10_000_000)).omitIf(func(b *Backend) bool { return b.MaxConns == 0 }),
		reload: "new flows; no connection is cut, and a raised cap serves waiting connections at once",
		doc:    `tcp VIPs in proxy mode: open connections to this backend; at the cap every algorithm skips it, and when every backend is at its cap new connections wait up to queue_timeout; 0 = no cap.`},
	{name: "max_conn_rate", val: intOf(func(b *Backend) *int { return &b.MaxConnRate }, 0, span[int64](0, 10_000_000)).omitIf(func(b *Backend) bool { return b.MaxConnRate == 0 }),
		reload: "new flows; the backend's token bucket carries over",
		doc:    `tcp VIPs in proxy mode: new connections a second to this backend (a token bucket with a burst of a tenth of a second's worth); over it every algorithm skips the backend as if full, and when every backend is full or over its rate new connections wait up to queue_timeout and are served as tokens come. Slow start ramps weight, not this rate. 0 = no cap.`},
	{name: "max_sessions", val: intOf(func(b *Backend) *int { return &b.MaxSessions }, 0, span[int64](0, 10_000_000)).omitIf(func(b *Backend) bool { return b.MaxSessions == 0 }),
		reload: "new flows; no session is ended",
		doc:    `udp VIPs in proxy mode: UDP sessions to this backend; when every backend is full a new session is dropped; 0 = no cap.`},
}

// routeKeys are the keys of a [[vip.route]] table. buildRoute fills
// Algorithm with the VIP's before resolving.
var routeKeys = []key[Route]{
	{name: "name", val: requiredName(func(r *Route) *string { return &r.Name }), reload: routeReload, def: "(required)",
		doc: `Names the route in status, metrics and health; unique within the VIP.`},
	{name: "names", val: routeNamesOf(), reload: routeReload, def: "(required, unless a postgres VIP's route has database or user)",
		doc: `Server names, case-insensitive: exact ("api.example.com") or wildcards ("*.example.com": one label or more before it, not example.com itself). An exact name beats every wildcard, a longer wildcard a shorter one; a name is listed by one route of the VIP at most. On a postgres VIP they match clients that open TLS at once (sslnegotiation=direct, PostgreSQL 17).`},
	{name: "database", val: startupListOf(func(r *Route) *[]string { return &r.Databases }, "database"), reload: routeReload, def: "(none: any)",
		doc: `VIPs with app_protocol = "postgres": the databases of plain-text StartupMessages the route takes, case-sensitive: exact ("app") or a prefix and "*" ("tenant_*"). A startup without a database names its user's, as PostgreSQL does. Routes are tried in file order; the first whose database and user lists (each, if given) match takes the connection.`},
	{name: "user", val: startupListOf(func(r *Route) *[]string { return &r.Users }, "user"), reload: routeReload, def: "(none: any)",
		doc: `VIPs with app_protocol = "postgres": the user names of plain-text StartupMessages the route takes, as database does (with database: both must match).`},
	{name: "algorithm", val: enumBy(func(r *Route) *l4.Algorithm { return &r.Algorithm }, func(r *Route) l4.Algorithm { return r.Algorithm }, l4.AlgorithmNames()),
		reload: routeReload, def: "the VIP's algorithm",
		doc: `How the route's backends are picked; its options (hash_key, maglev_table_size, least_time_*) are the VIP's.`},
	{name: "health", val: subTable[Route]("[vip.route.health]", nil, func(dst, src *Route) { dst.Health = src.Health }),
		reload: routeReload, def: "the VIP's [vip.health], then [defaults.health]",
		doc: `The route's health check: each key falls back on the VIP's [vip.health], then [defaults.health].`},
	{name: "backend", val: subTable[Route]("[[vip.route.backend]]", nil, func(dst, src *Route) { dst.Backends = src.Backends }),
		reload: routeReload, def: "(required)",
		doc: `The route's backends, at least one; addresses only (no DNS names, no srv).`},
}

// routeReload: Diff reports a VIP's routes as one setting (vipKeys' route).
const routeReload = "new connections; connections already routed keep their route and backend"

// startupListOf is a postgres route's database or user list, each entry
// checked (checkStartupValue).
func startupListOf(field func(r *Route) *[]string, what string) keyValue[Route] {
	return keyValue[Route]{
		resolve: func(l *layer, key string, own, _ rawTable, r *Route) {
			raw := value(l, key, get[[]any](own, key), opt[[]any]{}, nil, "an array of "+what+" names")
			if l.has(key) && len(raw) == 0 {
				l.problem(key, "must list at least one %s name (leave the key out to take any)", what)
			}
			l.eachString(key, raw, `a `+what+` name such as "app" or "app_*"`, func(i int, s string) {
				if err := checkStartupValue(s); err != nil {
					l.problem(key, "[%d] %q: %v", i, s, err)
				} else {
					*field(r) = append(*field(r), s)
				}
			})
		},
		toml: func(r *Route) string { return stringList(*field(r)) },
		omit: func(r *Route) bool { return len(*field(r)) == 0 },
		copy: func(dst, src *Route) { *field(dst) = *field(src) },
		form: `["NAME", "PREFIX*", ...]`,
	}
}

// backendName is a backend's optional name.
func backendName() keyValue[Backend] {
	v := stringOf(func(b *Backend) *string { return &b.Name }, "", quoteOrNone).omitIf(func(b *Backend) bool { return b.Name == "" })
	v.resolve = func(l *layer, key string, own, _ rawTable, b *Backend) {
		b.Name = l.str(key, get[string](own, key), opt[string]{}, "")
		switch {
		case l.ok(key) && !validName(b.Name):
			l.problem(key, "%q %s", b.Name, nameRule)
		case l.ok(key) && looksLikeIP(b.Name):
			l.problem(key, "%q looks like an IP address: drain, disable and enable take a backend's name or its address, so a name that is an address could pick another backend; use a name that is not an address (such as \"db1\"), or leave name out", b.Name)
		}
	}
	v.form, v.rule = `"NAME"`, nameRuleDoc+", not an IP address"
	return v
}

// backendAddress resolves address and srv: exactly one of them.
func backendAddress() keyValue[Backend] {
	return keyValue[Backend]{
		resolve: func(l *layer, _ string, own, _ rawTable, b *Backend) { backendTarget(l, own, b) },
		text:    func(b *Backend) string { return orNone(addressText(*b)) },
		toml:    func(b *Backend) string { return quoteTOML(addressText(*b)) },
		omit:    func(b *Backend) bool { return b.SRV != "" },
		copy: func(dst, src *Backend) {
			dst.Address, dst.Host, dst.Port = src.Address, src.Host, src.Port
		},
		form: `"IP:PORT" | "NAME:PORT"`,
	}
}

// backendSRV is srv, resolved with address.
func backendSRV() keyValue[Backend] {
	return keyValue[Backend]{
		text: func(b *Backend) string { return quoteOrNone(b.SRV) },
		toml: func(b *Backend) string { return quoteTOML(b.SRV) },
		omit: func(b *Backend) bool { return b.SRV == "" },
		copy: func(dst, src *Backend) { dst.SRV = src.SRV },
		form: `"_SERVICE._PROTO.DOMAIN"`,
	}
}

// routeNamesOf is a route's server names, each normalised (lower case, no
// trailing dot) and checked.
func routeNamesOf() keyValue[Route] {
	return keyValue[Route]{
		resolve: func(l *layer, key string, own, _ rawTable, r *Route) {
			raw := value(l, key, get[[]any](own, key), opt[[]any]{}, nil, "an array of server names")
			if !l.has(key) {
				return // checkRouteMatch: required unless database or user
			}
			if len(raw) == 0 {
				l.problem(key, "must list at least one server name")
			}
			l.eachString(key, raw, `a server name such as "api.example.com"`, func(i int, s string) {
				n := strings.TrimSuffix(strings.ToLower(s), ".")
				if err := checkServerName(n); err != nil {
					l.problem(key, "[%d] %q: %v", i, s, err)
				} else {
					r.Names = append(r.Names, n)
				}
			})
		},
		toml: func(r *Route) string { return stringList(r.Names) },
		omit: func(r *Route) bool { return len(r.Names) == 0 },
		copy: func(dst, src *Route) { dst.Names = src.Names },
		form: `["NAME", ...]`,
	}
}
