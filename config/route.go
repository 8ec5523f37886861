// [[vip.route]] tables: SNI routes of a tcp proxy VIP, each a server-name
// list (on a postgres VIP also database and user lists) with its own
// backends, algorithm and health check.

package config

import (
	"fmt"
	"maps"
	"strings"

	"github.com/l4lb/l4lb/l4"
)

// Route sends the TLS connections whose ClientHello names one of Names to
// its own backends. A VIP with routes peeks each client's ClientHello
// (never terminating TLS) before it picks a backend; its own
// [[vip.backend]] list is the default route, for names no route lists
// (and, with sni_no_match = "default", for clients that send no name or
// no TLS at all).
//
// On a VIP with app_protocol = "postgres" a route may also take the
// plain-text StartupMessages whose database (Databases) and user (Users)
// it lists: l4lb peeks the client's startup packet instead (never its
// password or queries, never terminating anything).
type Route struct {
	// Name identifies the route in status, metrics and health (a-z A-Z
	// 0-9 _ . -, unique within the VIP).
	Name string
	// Names are server names, lower case without a trailing dot: exact
	// ("api.example.com") or wildcards ("*.example.com": one label or
	// more before ".example.com", not example.com itself). An exact name
	// beats every wildcard and a longer wildcard a shorter one; a name is
	// listed by one route of the VIP at most.
	Names []string
	// Databases and Users (postgres VIPs) match a StartupMessage's
	// database and user parameters, case-sensitively: exact ("app") or a
	// prefix ending in "*" ("tenant_*"). A route with both lists takes a
	// startup that matches one entry of each; the first route in file
	// order that takes a startup wins.
	Databases []string
	Users     []string
	// Algorithm balances the route's backends; default the VIP's. Its
	// options (hash_key, maglev_table_size, least_time_*) are the VIP's.
	Algorithm l4.Algorithm
	// Health checks the route's backends: its [vip.route.health] keys,
	// else the VIP's [vip.health], else [defaults.health].
	Health   Health
	Backends []Backend
	// Line is where the route's [[vip.route]] header is in the file.
	Line int
}

// buildRoutes resolves and checks the [[vip.route]] tables of the VIP
// own (its [defaults] are def).
func buildRoutes(l *layer, own, def rawTable, v *VIP) []Route {
	raws := own.tables("route")
	if len(raws) == 0 {
		return nil
	}
	if !isTCPProxy(v) {
		l.p.add(l.vip, l.own+".route", "SNI routes apply only to tcp VIPs in proxy mode (l4lb reads the TLS ClientHello)")
		return nil
	}
	health := mergeHealth(own.table("health"), def.table("health"))
	out := make([]Route, 0, len(raws))
	names, seen := map[string]string{}, map[string]bool{}
	for k, raw := range raws {
		rl := newLayer(l.p, l.vip, fmt.Sprintf("%s.route[%d]", l.own, k), l.own)
		r := buildRoute(rl, raw, v, health)
		if r.Name != "" && seen[r.Name] {
			rl.problem("name", "route %q is defined twice", r.Name)
		}
		seen[r.Name] = true
		for _, n := range r.Names {
			if prev, dup := names[n]; dup {
				rl.problem("names", "%q is already a name of route %q", n, prev)
			}
			names[n] = r.Name
		}
		out = append(out, r)
	}
	return out
}

// buildRoute resolves one [[vip.route]] table; health is the table its
// [vip.route.health] falls back on.
func buildRoute(l *layer, own rawTable, v *VIP, health rawTable) Route {
	r := Route{Line: l.p.lines.line(l.own), Algorithm: v.Algorithm}
	resolveKeys(l, routeKeys, own, nil, &r)
	hl := newLayer(l.p, l.vip, l.own+".health", l.def+".health")
	r.Health = buildHealth(hl, own.table("health"), health, v.Protocol, sentProxyProtocol(v), firstExactName(r.Names))
	r.Backends = buildBackends(l, own.tables("backend"))
	checkRouteMatch(l, &r, v)
	for j, b := range r.Backends {
		if b.IsNamed() {
			key := "address"
			if b.SRV != "" {
				key = "srv"
			}
			l.p.add(l.vip, fmt.Sprintf("%s.backend[%d].%s", l.own, j, key),
				"a route's backends are addresses (ip:port): DNS-named backends are for the VIP's own [[vip.backend]] list only")
		}
		if b.MaxSessions > 0 {
			l.p.add(l.vip, fmt.Sprintf("%s.backend[%d].max_sessions", l.own, j),
				"applies only to udp VIPs (routes are on tcp VIPs: max_conns)")
		}
	}
	if r.Algorithm == l4.Maglev && v.MaglevTableSize < 100*len(r.Backends) {
		l.problem("algorithm", "maglev: the VIP's maglev_table_size %d is too small for %d backends (use a prime >= %d)",
			v.MaglevTableSize, len(r.Backends), 100*len(r.Backends))
	}
	return r
}

// checkRouteMatch: a route matches something, and by database or user
// only on a postgres VIP.
func checkRouteMatch(l *layer, r *Route, v *VIP) {
	startup := len(r.Databases) > 0 || len(r.Users) > 0
	switch {
	case startup && v.AppProtocol != l4.AppPostgres:
		key := "database"
		if len(r.Databases) == 0 {
			key = "user"
		}
		l.problem(key, "applies only to VIPs with app_protocol = \"postgres\" (l4lb reads the PostgreSQL StartupMessage)")
	case !startup && !l.has("names"):
		what := "the server names the route takes, such as [\"api.example.com\", \"*.example.com\"]"
		if v.AppProtocol == l4.AppPostgres {
			what = "names (server names), database or user: what the route takes"
		}
		l.problem("names", "is required: %s", what)
	}
}

// checkStartupValue accepts a database or user name as PostgreSQL takes
// it (1 to 63 bytes, no NUL), or such a prefix followed by "*".
func checkStartupValue(s string) error {
	body := strings.TrimSuffix(s, "*")
	switch {
	case body == "":
		return fmt.Errorf("a name, or a prefix and \"*\" such as \"tenant_*\" (a route without the key takes any)")
	case len(body) > 63:
		return fmt.Errorf("longer than 63 bytes (PostgreSQL's name limit)")
	case strings.ContainsAny(body, "*\x00"):
		return fmt.Errorf("\"*\" only at the end (a prefix), and no NUL")
	}
	return nil
}

// firstExactName is the first of names without a wildcard, or "".
func firstExactName(names []string) string {
	for _, n := range names {
		if !strings.HasPrefix(n, "*.") {
			return n
		}
	}
	return ""
}

// checkServerName accepts a DNS name, or "*." and a DNS name of two
// labels or more.
func checkServerName(n string) error {
	host, wild := strings.CutPrefix(n, "*.")
	if strings.Contains(host, "*") {
		return fmt.Errorf("a wildcard is \"*.\" and a domain at the start, such as \"*.example.com\"")
	}
	if wild && !strings.Contains(host, ".") {
		return fmt.Errorf("a wildcard needs a domain of two labels or more (\"*.example.com\", not \"*.com\")")
	}
	if len(host) == 0 || len(host) > 253 {
		return fmt.Errorf("not a server name (1 to 253 characters)")
	}
	for _, label := range strings.Split(host, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q: 1 to 63 of a-z 0-9 - _, not starting or ending with -", label)
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("label %q: 1 to 63 of a-z 0-9 - _, not starting or ending with -", label)
			}
		}
	}
	return nil
}

// mergeHealth returns the health keys a route falls back on: the VIP's
// own, else [defaults.health].
func mergeHealth(vip, def rawTable) rawTable {
	out := maps.Clone(def)
	if out == nil {
		out = rawTable{}
	}
	for k, v := range vip {
		maps.DeleteFunc(out, func(d string, _ any) bool { return strings.EqualFold(d, k) })
		out[k] = v
	}
	return out
}
