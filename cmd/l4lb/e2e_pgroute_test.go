// End to end: PostgreSQL routed by database and user through the daemon,
// nothing terminated, with psql against two real servers: plain-text
// startups by database and user, an SSLRequest to the default backend,
// a client opening TLS at once (sslnegotiation=direct, pgx) by SNI, and a
// malformed startup reset.

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// pgRouteConf: a postgres VIP whose own backend (the default route) is
// server B; routes send database a, the user bob, and the TLS name
// a.db.example.test (to a TLS relay in front of A) to server A.
func pgRouteConf(a, b, relay netip.AddrPort) string {
	return newConf().vip("pg", ":5432", `app_protocol = "postgres"`, `sni_timeout = "2s"`).
		health(`type = "tcp"`, `interval = "500ms"`, `timeout = "400ms"`).at("pgb", b).
		raw(fmt.Sprintf(`  [[vip.route]]
  name = "a"
  database = ["a", "tenant_*"]
    [[vip.route.backend]]
    name = "a0"
    address = "%s"
  [[vip.route]]
  name = "bob"
  user = ["bob"]
    [[vip.route.backend]]
    name = "bob0"
    address = "%s"
  [[vip.route]]
  name = "direct"
  names = ["a.db.example.test"]
    [[vip.route.backend]]
    name = "relay0"
    address = "%s"
`, a, a, relay)).String()
}

// psqlVIP runs psql in the client namespace against the VIP with the
// connection options given and returns the address of the server that
// answered (inet_server_addr), or fails.
func psqlVIP(t *testing.T, tp *testutil.Topology, opts string) string {
	t.Helper()
	out, err := psqlVIPErr(tp, opts)
	if err != nil {
		t.Fatalf("psql %q through the VIP: %v: %s", opts, err, out)
	}
	return out
}

func psqlVIPErr(tp *testutil.Topology, opts string) (string, error) {
	conn := fmt.Sprintf("host=%s port=5432 connect_timeout=10 %s", tp.VIP, opts)
	out, err := tp.Client.Command("psql", conn, "-Atc", "select host(inet_server_addr())").CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// tlsRelay runs, in ns on addr, what a PostgreSQL 17 server does with
// sslnegotiation=direct: TLS at once, with ALPN "postgresql" required;
// behind it, the plain-text protocol goes on to the server at to. It
// counts the handshakes that negotiated "postgresql".
func tlsRelay(t *testing.T, ns *testutil.Netns, addr string, to netip.AddrPort) *atomic.Int64 {
	t.Helper()
	var alpn atomic.Int64
	cert, _ := testutil.SelfSignedTLS(t, "a.db.example.test")
	var ln net.Listener
	ns.MustDo(t, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	t.Cleanup(func() { ln.Close() })
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"postgresql"}}
	testutil.ServeConns(ln, func(c net.Conn) {
		tc := tls.Server(c, cfg)
		tc.SetDeadline(time.Now().Add(30 * time.Second))
		if tc.Handshake() != nil || tc.ConnectionState().NegotiatedProtocol != "postgresql" {
			return
		}
		alpn.Add(1)
		var up net.Conn
		if ns.Do(func() (err error) { up, err = net.DialTimeout("tcp4", to.String(), 5*time.Second); return err }) != nil {
			return
		}
		defer up.Close()
		go io.Copy(up, tc)
		io.Copy(tc, up)
	})
	return &alpn
}

// pgxDirect connects with pgx through the VIP by the name host, opening
// TLS at once (sslnegotiation=direct, ALPN postgresql, SNI host), and
// returns the address of the server that answered.
func pgxDirect(t *testing.T, tp *testutil.Topology, host, db string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=require sslnegotiation=direct", host, db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{tp.VIP.String()}, nil }
	cfg.DialFunc = func(_ context.Context, _, _ string) (c net.Conn, err error) {
		err = tp.Client.Do(func() (err error) {
			c, err = net.DialTimeout("tcp4", netip.AddrPortFrom(tp.VIP, 5432).String(), 5*time.Second)
			return err
		})
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgx with sslnegotiation=direct to %s through the VIP: %v", host, err)
	}
	defer conn.Close(ctx)
	var addr string
	if err := conn.QueryRow(ctx, "select host(inet_server_addr())").Scan(&addr); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestPostgresRoutes: psql -d a reaches server A by its route, -d b the
// default route (B), a prefix route takes tenant_1, -U bob reaches A by
// user; sslmode=require (an SSLRequest: the startup is inside TLS) goes to
// the default route; a client opening TLS at once reaches A by its server
// name with ALPN postgresql; a malformed startup is reset, no backend
// dialed. Status counts each and lists the routes' databases and users,
// and explain lists each route's match.
func TestPostgresRoutes(t *testing.T) {
	testutil.RequireTool(t, "psql")
	tp := testutil.NewTopology(t, 2)
	var pg [2]*testutil.Postgres
	for i := range pg {
		pg[i] = testutil.StartPostgres(t, testutil.PostgresOptions{Netns: tp.Backends[i], Addr: tp.BackendIP(i), TLS: true})
	}
	pg[0].Exec(t, "CREATE DATABASE a")
	pg[0].Exec(t, "CREATE DATABASE tenant_1")
	pg[0].Exec(t, "CREATE ROLE bob LOGIN")
	pg[1].Exec(t, "CREATE DATABASE b")
	relayAddr := netip.AddrPortFrom(tp.BackendIP(0), 6543)
	alpn := tlsRelay(t, tp.Backends[0], relayAddr.String(), pg[0].Addr)
	lb := startLB(t, tp, pgRouteConf(pg[0].Addr, pg[1].Addr, relayAddr))
	lb.waitHealth(t, "pg", "pgb", "up")
	A, B := tp.BackendIP(0).String(), tp.BackendIP(1).String()

	for _, c := range []struct{ opts, want string }{
		{"user=postgres dbname=a sslmode=disable", A},
		{"user=postgres dbname=b sslmode=disable", B},
		{"user=postgres dbname=tenant_1 sslmode=disable", A},
		{"user=bob dbname=postgres sslmode=disable", A},
		{"user=postgres dbname=postgres sslmode=disable", B},
		{"user=postgres dbname=b sslmode=require", B},
	} {
		if got := psqlVIP(t, tp, c.opts); got != c.want {
			t.Errorf("psql %q answered by %s, want %s", c.opts, got, c.want)
		}
	}
	// An SSLRequest hides the database: the default route takes it, even
	// for a database only a route's server has.
	if out, err := psqlVIPErr(tp, "user=postgres dbname=a sslmode=require"); err == nil || !strings.Contains(out, `database "a" does not exist`) {
		t.Errorf("psql sslmode=require dbname=a: %v: %s; want the default route's server (B) to refuse it", err, out)
	}
	if got := pgxDirect(t, tp, "a.db.example.test", "a"); got != A {
		t.Errorf("sslnegotiation=direct answered by %s, want %s", got, A)
	}
	if alpn.Load() != 1 {
		t.Errorf("%d TLS handshakes negotiated ALPN postgresql at the relay, want 1", alpn.Load())
	}
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp4", netip.AddrPortFrom(tp.VIP, 5432).String(), 5*time.Second)
		return err
	})
	defer c.Close()
	c.Write([]byte{0, 0, 0, 8, 0, 2, 0, 0}) // protocol 2.0
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Errorf("a protocol 2 startup: read ended with %v, want a reset", err)
	}

	lb.waitStatus(t, 5*time.Second, "startup counters", func(st plane.Status) bool {
		s := vipNamed(st, "pg").SNI
		return s != nil && s.Startup != nil && s.Startup.Malformed == 1
	})
	s := lb.vip(t, "pg").SNI
	if got := *s.Startup; got.Routed != 3 || got.NoMatch != 2 || got.Encrypted != 2 || got.Malformed != 1 || got.Cancels != 0 {
		t.Errorf("startup counters %+v, want routed 3, no match 2, encrypted 2, malformed 1", got)
	}
	routed := map[string]uint64{}
	for _, r := range s.Routes {
		routed[r.Name] = r.Routed
	}
	if routed["a"] != 2 || routed["bob"] != 1 || routed["direct"] != 1 || s.Default != 4 {
		t.Errorf("routed %v, default %d; want a 2, bob 1, direct 1, default 4", routed, s.Default)
	}
	explain := lb.verb(t, "explain", "pg", tp.ClientIP.String())
	for _, want := range []string{"route a: database a,tenant_*  eligible 1", "route bob: user bob  eligible 1", "route direct: a.db.example.test  eligible 1", "the pick is the default route's"} {
		if !strings.Contains(explain, want) {
			t.Errorf("explain lacks %q:\n%s", want, explain)
		}
	}
	text := lb.statusText(t)
	for _, want := range []string{"route a  database a,tenant_*  ", "route bob  user bob  ", "route direct  a.db.example.test  ", "pg startup: routed 3  no-match 2  ssl-or-gss 2  cancel 0  malformed 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("status text lacks %q:\n%s", want, text)
		}
	}
}
