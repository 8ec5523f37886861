// SNI routes of a TCP VIP: which snapshot a connection picks from, by the
// server name of its TLS ClientHello (evhello.go peeks it), or on a
// postgres VIP by the database and user of its StartupMessage
// (evstartup.go).

package proxy

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// NoRoute says what happens to a connection whose ClientHello matches no
// route: not TLS, malformed, without a server name, or a name no route
// lists (sni_no_match): l4's type and values, under this package's names.
type NoRoute = l4.SNINoMatch

const (
	NoRouteDefault = l4.SNINoMatchDefault // the VIP's own backends take it
	NoRouteClose   = l4.SNINoMatchClose   // it is reset, no backend dialed
)

// Route is one SNI route: its names' connections pick from Snapshots and
// report connects to Observer (the route's health). The runtime keeps a
// Route across reloads, so its counter goes on.
type Route struct {
	Name      string
	Snapshots *snapshot.Store
	Observer  Observer // nil = none
	// Routed counts the connections sent to the route.
	Routed atomic.Uint64
}

// Routes is a VIP's SNI routing table; immutable once built. Names are
// lower case without a trailing dot; "*.example.com" matches any name
// ending in ".example.com" (one label or more before it, as nginx's
// server_name and HAProxy's `req.ssl_sni -m end` do). An exact name beats
// every wildcard, and a longer wildcard beats a shorter one.
type Routes struct {
	exact map[string]*Route
	wild  map[string]*Route // by the suffix after "*."
	// startup: the routes by database and user, in order; Startup: the
	// VIP reads PostgreSQL StartupMessages (app_protocol postgres).
	startup []startupRoute
	Startup bool
	// Timeout bounds the wait for a complete ClientHello or startup
	// packet (sni_timeout).
	Timeout time.Duration
	NoMatch NoRoute
}

// startupRoute is a route's database and user patterns (nil: any).
type startupRoute struct {
	r          *Route
	dbs, users []pattern
}

// pattern is a database or user name, or a prefix (written "prefix*").
type pattern struct {
	s      string
	prefix bool
}

func (p pattern) match(b []byte) bool {
	if p.prefix {
		return len(b) >= len(p.s) && string(b[:len(p.s)]) == p.s
	}
	return string(b) == p.s
}

// matchAny reports whether b matches one of ps; no patterns match all.
func matchAny(ps []pattern, b []byte) bool {
	for _, p := range ps {
		if p.match(b) {
			return true
		}
	}
	return ps == nil
}

func patterns(ss []string) []pattern {
	if len(ss) == 0 {
		return nil
	}
	out := make([]pattern, len(ss))
	for i, s := range ss {
		body, prefix := strings.CutSuffix(s, "*")
		out[i] = pattern{body, prefix}
	}
	return out
}

// WithStartup makes t read PostgreSQL StartupMessages: routes[i] takes
// the startups whose database matches one of databases[i] and whose user
// one of users[i] (either nil: any; both nil: the route takes none by
// startup), the first route in order that matches. Called once, before t
// is used.
func (t *Routes) WithStartup(routes []*Route, databases, users [][]string) *Routes {
	t.Startup = true
	for i, r := range routes {
		if len(databases[i]) > 0 || len(users[i]) > 0 {
			t.startup = append(t.startup, startupRoute{r, patterns(databases[i]), patterns(users[i])})
		}
	}
	return t
}

// LookupStartup returns the first route that takes a startup for
// database and user, or nil; it allocates nothing.
func (t *Routes) LookupStartup(database, user []byte) *Route {
	for i := range t.startup {
		if sr := &t.startup[i]; matchAny(sr.dbs, database) && matchAny(sr.users, user) {
			return sr.r
		}
	}
	return nil
}

// NewRoutes builds a table from each route's names. A name listed twice
// is an error (config validation refuses it first).
func NewRoutes(routes []*Route, names [][]string, timeout time.Duration, noMatch NoRoute) (*Routes, error) {
	t := &Routes{exact: map[string]*Route{}, wild: map[string]*Route{}, Timeout: timeout, NoMatch: noMatch}
	for i, r := range routes {
		for _, n := range names[i] {
			n = strings.TrimSuffix(strings.ToLower(n), ".")
			m, key := t.exact, n
			if rest, ok := strings.CutPrefix(n, "*."); ok {
				m, key = t.wild, rest
			}
			if _, dup := m[key]; dup || key == "" {
				return nil, fmt.Errorf("sni route %q: name %q listed twice or empty", r.Name, n)
			}
			m[key] = r
		}
	}
	return t, nil
}

// maxName bounds a server name (DNS: 255 bytes).
const maxName = 255

// Lookup returns the route for a server name as the client sent it, or
// nil. low is a buffer of maxName bytes for the lower-cased name: the
// lookup allocates nothing.
func (t *Routes) Lookup(name, low []byte) *Route {
	if len(name) > 0 && name[len(name)-1] == '.' {
		name = name[:len(name)-1]
	}
	if len(name) == 0 || len(name) > maxName || len(low) < len(name) {
		return nil
	}
	low = low[:len(name)]
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
	}
	if r := t.exact[string(low)]; r != nil {
		return r
	}
	for i, c := range low {
		if c == '.' {
			if r := t.wild[string(low[i+1:])]; r != nil {
				return r
			}
		}
	}
	return nil
}

// byName returns the route called name, or nil (an upgrade's handover:
// not a hot path).
func (t *Routes) byName(name string) *Route {
	if t == nil {
		return nil
	}
	for _, m := range [2]map[string]*Route{t.exact, t.wild} {
		for _, r := range m {
			if r.Name == name {
				return r
			}
		}
	}
	for _, sr := range t.startup {
		if sr.r.Name == name {
			return sr.r
		}
	}
	return nil
}
