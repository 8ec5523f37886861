package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

// TestRoutes: routes resolve with their names normalised, the VIP's
// algorithm and health as defaults, and their own backends.
func TestRoutes(t *testing.T) {
	c := mustParse(t, `
[defaults.health]
interval = "3s"
[[vip]]
name = "tls"
listen = "198.18.0.10:443"
algorithm = "least_conn"
sni_timeout = "2s"
sni_no_match = "close"
  [vip.health]
  rise = 4
  [[vip.backend]]
  address = "198.18.1.11:443"
  [[vip.route]]
  name = "api"
  names = ["API.Example.com.", "*.api.example.com"]
    [[vip.route.backend]]
    address = "198.18.1.21:443"
  [[vip.route]]
  name = "ws"
  names = ["ws.example.com"]
  algorithm = "maglev"
    [vip.route.health]
    type = "http"
    path = "/health"
    [[vip.route.backend]]
    address = "198.18.1.31:443"
    [[vip.route.backend]]
    address = "198.18.1.32:443"
`)
	v := c.VIP("tls")
	if v.SNITimeout.String() != "2s" || v.SNINoMatch != l4.SNINoMatchClose || len(v.Routes) != 2 {
		t.Fatalf("sni_timeout %v, sni_no_match %q, %d routes", v.SNITimeout, v.SNINoMatch, len(v.Routes))
	}
	api, ws := v.Routes[0], v.Routes[1]
	if !slices.Equal(api.Names, []string{"api.example.com", "*.api.example.com"}) || api.Algorithm != l4.LeastConn || len(api.Backends) != 1 {
		t.Errorf("api route: %+v", api)
	}
	if api.Health.Rise != 4 || api.Health.Interval.String() != "3s" || api.Health.Type != l4.CheckTCP {
		t.Errorf("api health (from the VIP's, then [defaults.health]): %+v", api.Health)
	}
	if ws.Algorithm != l4.Maglev || ws.Health.Type != l4.CheckHTTP || ws.Health.Path != "/health" || ws.Health.Rise != 4 || len(ws.Backends) != 2 || ws.Line == 0 {
		t.Errorf("ws route: %+v", ws)
	}
	if other := mustParse(t, oneVIP("")).VIP("pg"); other.SNITimeout.String() != "5s" || other.SNINoMatch != l4.SNINoMatchDefault || other.Routes != nil {
		t.Errorf("a VIP without routes: %v %q %v", other.SNITimeout, other.SNINoMatch, other.Routes)
	}
}

func TestRouteProblems(t *testing.T) {
	route := func(body string) string {
		return oneVIP(`  [[vip.route]]
` + body + `
    [[vip.route.backend]]
    address = "198.18.1.21:443"
`)
	}
	for _, c := range []problemCase{
		{"name missing", oneVIP(`  [[vip.route]] # <-
  names = ["a.example.com"]
    [[vip.route.backend]]
    address = "198.18.1.21:443"
`), "vip[0].route[0].name", "pg", "is required"},
		{"names missing", oneVIP(`  [[vip.route]] # <-
  name = "a"
    [[vip.route.backend]]
    address = "198.18.1.21:443"
`), "vip[0].route[0].names", "pg", "is required"},
		{"names empty", route(`  name = "a"
  names = [] # <-`), "vip[0].route[0].names", "pg", "at least one"},
		{"bad wildcard", route(`  name = "a"
  names = ["a.*.example.com"] # <-`), "vip[0].route[0].names", "pg", "wildcard"},
		{"wildcard tld", route(`  name = "a"
  names = ["*.com"] # <-`), "vip[0].route[0].names", "pg", "two labels"},
		{"bad label", route(`  name = "a"
  names = ["-a.example.com"] # <-`), "vip[0].route[0].names", "pg", "label"},
		{"not a string", route(`  name = "a"
  names = [1] # <-`), "vip[0].route[0].names", "pg", "not an integer"},
		{"name twice", oneVIP(`  [[vip.route]]
  name = "a"
  names = ["a.example.com"]
    [[vip.route.backend]]
    address = "198.18.1.21:443"
  [[vip.route]]
  name = "b"
  names = ["b.example.com", "A.example.com."] # <-
    [[vip.route.backend]]
    address = "198.18.1.22:443"
`), "vip[0].route[1].names", "pg", `"a.example.com" is already a name of route "a"`},
		{"route twice", oneVIP(`  [[vip.route]]
  name = "a"
  names = ["a.example.com"]
    [[vip.route.backend]]
    address = "198.18.1.21:443"
  [[vip.route]]
  name = "a" # <-
  names = ["b.example.com"]
    [[vip.route.backend]]
    address = "198.18.1.22:443"
`), "vip[0].route[1].name", "pg", "defined twice"},
		{"no backend", oneVIP(`  [[vip.route]] # <-
  name = "a"
  names = ["a.example.com"]
`), "vip[0].route[0].backend", "pg", "at least one"},
		{"udp vip", `[[vip]] # <-
name = "dns"
listen = "198.18.0.10:53"
protocol = "udp"
  [[vip.backend]]
  address = "198.18.1.11:53"
  [[vip.route]]
  name = "a"
  names = ["a.example.com"]
    [[vip.route.backend]]
    address = "198.18.1.21:53"
`, "vip[0].route", "dns", "only to tcp VIPs in proxy mode"},
		{"named route backend", oneVIP(`  [[vip.route]]
  name = "a"
  names = ["a.example.com"]
    [[vip.route.backend]]
    address = "api.example.com:443" # <-
`), "vip[0].route[0].backend[0].address", "pg", "DNS-named backends"},
		{"route backend max_sessions", oneVIP(`  [[vip.route]]
  name = "a"
  names = ["a.example.com"]
    [[vip.route.backend]]
    address = "198.18.1.21:443"
    max_sessions = 5 # <-
`), "vip[0].route[0].backend[0].max_sessions", "pg", "only to udp VIPs"},
		{"sni_timeout without routes", oneVIP(`sni_timeout = "1s" # <-`), "vip[0].sni_timeout", "pg", "[[vip.route]]"},
		{"sni_no_match value", oneVIP(`sni_no_match = "drop" # <-
  [[vip.route]]
  name = "a"
  names = ["a.example.com"]
    [[vip.route.backend]]
    address = "198.18.1.21:443"
`), "vip[0].sni_no_match", "pg", "close"},
	} {
		t.Run(c.name, c.run)
	}
}

// TestRoutesFormatRoundTrip: routes survive Format and Parse.
func TestRoutesFormatRoundTrip(t *testing.T) {
	c := mustParse(t, oneVIP(`sni_no_match = "close"
  [[vip.route]]
  name = "a"
  names = ["a.example.com", "*.b.example.com"]
  algorithm = "p2c"
    [vip.route.health]
    type = "send_expect"
    send = "PING\r\n"
    expect = "+PONG"
    [[vip.route.backend]]
    name = "x"
    address = "198.18.1.21:443"
    weight = 7
`))
	back := roundTrip(t, c)
	if r := back.VIP("pg").Routes; len(r) != 1 || r[0].Algorithm != l4.P2C || r[0].Backends[0].Weight != 7 || string(r[0].Health.Expect) != "+PONG" {
		t.Fatalf("routes after a round trip: %+v", r)
	}
	var _ config.Route = back.VIP("pg").Routes[0]
}

// TestPostgresRoutes: on a postgres VIP a route may take startups by
// database and user instead of (or besides) server names; they keep
// their order and case, and survive Format and Parse.
func TestPostgresRoutes(t *testing.T) {
	c := mustParse(t, oneVIP(`app_protocol = "postgres"
  [[vip.route]]
  name = "a"
  database = ["App", "tenant_*"]
    [[vip.route.backend]]
    address = "198.18.1.21:5432"
  [[vip.route]]
  name = "b"
  user = ["report"]
  database = ["app"]
  names = ["db.example.com"]
    [[vip.route.backend]]
    address = "198.18.1.22:5432"
`))
	rs := c.VIP("pg").Routes
	if len(rs) != 2 || !slices.Equal(rs[0].Databases, []string{"App", "tenant_*"}) || rs[0].Users != nil || rs[0].Names != nil ||
		!slices.Equal(rs[1].Users, []string{"report"}) || !slices.Equal(rs[1].Databases, []string{"app"}) || !slices.Equal(rs[1].Names, []string{"db.example.com"}) {
		t.Fatalf("routes: %+v", rs)
	}
	back := roundTrip(t, c).VIP("pg").Routes
	if len(back) != 2 || !slices.Equal(back[0].Databases, rs[0].Databases) || back[0].Names != nil || !slices.Equal(back[1].Users, rs[1].Users) {
		t.Fatalf("routes after a round trip: %+v", back)
	}
}

func TestPostgresRouteProblems(t *testing.T) {
	route := func(proto, body string) string {
		return oneVIP(proto + `
  [[vip.route]]
  name = "a"
` + body + `
    [[vip.route.backend]]
    address = "198.18.1.21:5432"
`)
	}
	pg := `app_protocol = "postgres"`
	for _, c := range []problemCase{
		{"database without postgres", route("", `  database = ["app"] # <-`), "vip[0].route[0].database", "pg", `app_protocol = "postgres"`},
		{"user on mysql", route(`app_protocol = "mysql"`, `  user = ["app"] # <-`), "vip[0].route[0].user", "pg", `app_protocol = "postgres"`},
		{"nothing to match", oneVIP(pg+`
  [[vip.route]] # <-
  name = "a"
    [[vip.route.backend]]
    address = "198.18.1.21:5432"
`), "vip[0].route[0].names", "pg", "database or user"},
		{"lone star", route(pg, `  database = ["*"] # <-`), "vip[0].route[0].database", "pg", "takes any"},
		{"inner star", route(pg, `  user = ["a*b"] # <-`), "vip[0].route[0].user", "pg", "only at the end"},
		{"empty list", route(pg, `  user = [] # <-`), "vip[0].route[0].user", "pg", "at least one"},
		{"too long", route(pg, `  database = ["`+strings.Repeat("d", 64)+`"] # <-`), "vip[0].route[0].database", "pg", "63 bytes"},
	} {
		t.Run(c.name, c.run)
	}
}
