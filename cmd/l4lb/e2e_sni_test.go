// End to end: TLS routed by server name through the daemon, TLS ending at
// the backends: wss:// WebSockets with a verifying TLS client, a client
// without TLS, a silent one, and a reload that adds a route.

package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/internal/testutil/wsecho"
)

// sniConfig: a VIP on 443 whose own backend is the default route, with
// three routes (an exact name, two names, a wildcard) to three pools.
const sniConfig = `
[global]
admin_socket = "@ADMIN@"

[[vip]]
name = "tls"
listen = "198.18.2.10:443"
sni_timeout = "500ms"
  [vip.health]
  type = "tcp"
  interval = "500ms"
  timeout = "400ms"
  [[vip.backend]]
  name = "def"
  address = "198.18.1.11:9443"
  [[vip.route]]
  name = "api"
  names = ["api.example.test"]
    [[vip.route.backend]]
    name = "api0"
    address = "198.18.1.12:9443"
  [[vip.route]]
  name = "db"
  names = ["db.example.test", "DB.example.org"]
    [[vip.route.backend]]
    name = "db0"
    address = "198.18.1.11:9444"
  [[vip.route]]
  name = "chat"
  names = ["*.chat.example.test"]
  algorithm = "least_conn"
    [vip.route.health]
    type = "none"
    [[vip.route.backend]]
    name = "chat0"
    address = "198.18.1.13:9443"
@MORE@`

// wssServer runs a TLS WebSocket echo server named name in ns on addr
// (TLS ends there); a client that does not start with a TLS record gets
// "plain NAME: " and its first bytes back.
func wssServer(t *testing.T, ns *testutil.Netns, addr, name string, cert tls.Certificate) {
	t.Helper()
	var ln net.Listener
	ns.MustDo(t, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	t.Cleanup(func() { ln.Close() })
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	testutil.ServeConns(ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		first, err := br.Peek(1)
		if err != nil {
			return
		}
		if first[0] != 0x16 {
			line, _ := br.ReadString('\n')
			io.WriteString(c, "plain "+name+": "+line)
			return
		}
		c.SetDeadline(time.Time{})
		_ = wsecho.ServeConn(tls.Server(&peeked{Conn: c, r: br}, cfg), name)
	})
}

// peeked is a connection whose first bytes sit in r.
type peeked struct {
	net.Conn
	r *bufio.Reader
}

func (p *peeked) Read(b []byte) (int, error) { return p.r.Read(b) }

// wss opens wss://host through the VIP with a TLS client that verifies
// the certificate for host, and returns the WebSocket (its Backend says
// which server answered).
func wss(t *testing.T, tp *testutil.Topology, host string, roots *x509.CertPool) *wsecho.Conn {
	t.Helper()
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp4", tp.VIP.String()+":443", 5*time.Second)
		return err
	})
	t.Cleanup(func() { c.Close() })
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: roots})
	deadline := time.Now().Add(10 * time.Second)
	tc.SetDeadline(deadline)
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS to %s through the VIP: %v", host, err)
	}
	ws, err := wsecho.Handshake(tc, host, deadline)
	if err != nil {
		t.Fatalf("wss://%s: %v", host, err)
	}
	return ws
}

// TestSNIWebSocketDaemon: wss:// clients for each name land on their
// route's pool (exact, two names, wildcard) and messages echo; a name no
// route lists goes to the VIP's own backend; a plain-text client too; a
// silent client is reset after sni_timeout; status counts each; a reload
// adds a route and a WebSocket opened before it keeps echoing.
func TestSNIWebSocketDaemon(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	names := []string{"api.example.test", "db.example.test", "db.example.org", "*.chat.example.test", "*.b.chat.example.test", "other.example.test", "new.example.test"} // x509 wildcards cover one label
	cert, roots := testutil.SelfSignedTLS(t, names...)
	wssServer(t, tp.Backends[0], "198.18.1.11:9443", "def", cert)
	wssServer(t, tp.Backends[1], "198.18.1.12:9443", "api", cert)
	wssServer(t, tp.Backends[0], "198.18.1.11:9444", "db", cert)
	wssServer(t, tp.Backends[2], "198.18.1.13:9443", "chat", cert)
	wssServer(t, tp.Backends[2], "198.18.1.13:9444", "new", cert)
	lb := startLB(t, tp, strings.Replace(sniConfig, "@MORE@", "# more routes\n", 1))

	var open []*wsecho.Conn
	for _, c := range []struct{ host, pool string }{
		{"api.example.test", "api"},
		{"db.example.test", "db"},
		{"db.example.org", "db"},
		{"eu.chat.example.test", "chat"},
		{"a.b.chat.example.test", "chat"},
		{"other.example.test", "def"},
		{"new.example.test", "def"}, // before the reload
	} {
		ws := wss(t, tp, c.host, roots)
		if ws.Backend != c.pool {
			t.Errorf("wss://%s reached %q, want %q", c.host, ws.Backend, c.pool)
		}
		for i := range 3 {
			if err := ws.Echo(fmt.Appendf(nil, "%s #%d", c.host, i), time.Now().Add(5*time.Second)); err != nil {
				t.Fatalf("wss://%s: %v", c.host, err)
			}
		}
		open = append(open, ws)
	}

	// Not TLS: the default route, bytes untouched.
	var plain net.Conn
	tp.Client.MustDo(t, func() (err error) {
		plain, err = net.DialTimeout("tcp4", tp.VIP.String()+":443", 5*time.Second)
		return err
	})
	defer plain.Close()
	plain.SetDeadline(time.Now().Add(10 * time.Second))
	plain.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	if b, _ := io.ReadAll(plain); string(b) != "plain def: GET / HTTP/1.0\r\n" {
		t.Fatalf("plain client through the default route: %q", b)
	}
	// Silent: reset after sni_timeout.
	var silent net.Conn
	tp.Client.MustDo(t, func() (err error) {
		silent, err = net.DialTimeout("tcp4", tp.VIP.String()+":443", 5*time.Second)
		return err
	})
	defer silent.Close()
	silent.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := io.ReadAll(silent); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Fatalf("silent client: %v, want a reset", err)
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 5*time.Second {
		t.Fatalf("silent client reset after %v, want about sni_timeout (500ms)", took)
	}

	st := lb.status(t).VIPs[0]
	if s := st.SNI; s == nil || len(s.Routes) != 3 || s.Routes[0].Routed != 1 || s.Routes[1].Routed != 2 || s.Routes[2].Routed != 2 ||
		s.Default != 3 || s.NoMatchCount != 2 || s.NotTLS != 1 || s.Timeouts != 1 {
		t.Fatalf("status: %+v", st.SNI)
	}
	if out, _, _ := l4lbCmd(t, "status", "--socket", lb.cfg[:strings.LastIndex(lb.cfg, "/")]+"/admin.sock"); !strings.Contains(out, "sni-timeouts 1") ||
		!strings.Contains(out, "route chat  *.chat.example.test  least_conn") || !strings.Contains(out, "chat0") {
		t.Fatalf("status text:\n%s", out)
	}

	// A reload adds a route: new.example.test moves to its pool; every
	// WebSocket opened before still echoes.
	more := "  [[vip.route]]\n  name = \"new\"\n  names = [\"new.example.test\"]\n    [[vip.route.backend]]\n    address = \"198.18.1.13:9444\"\n"
	lb.writeConfig(t, strings.Replace(lb.currentConfig(t), "# more routes\n", more, 1))
	lb.reloadOK(t)
	if ws := wss(t, tp, "new.example.test", roots); ws.Backend != "new" {
		t.Fatalf("after the reload wss://new.example.test reached %q", ws.Backend)
	}
	for _, ws := range open {
		if err := ws.Echo([]byte("after the reload"), time.Now().Add(5*time.Second)); err != nil {
			t.Fatalf("a WebSocket from before the reload (%s): %v", ws.Backend, err)
		}
	}
}

// TestSNIUpgradeKeepsRoutedConns: an upgrade hands a connection an SNI
// route chose to the new l4lb, which counts it on the route's backend; the
// wss:// WebSocket goes on echoing.
func TestSNIUpgradeKeepsRoutedConns(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	cert, roots := testutil.SelfSignedTLS(t, "api.example.test")
	wssServer(t, tp.Backends[0], "198.18.1.11:9443", "def", cert)
	wssServer(t, tp.Backends[1], "198.18.1.12:9443", "api", cert)
	wssServer(t, tp.Backends[0], "198.18.1.11:9444", "db", cert)
	wssServer(t, tp.Backends[2], "198.18.1.13:9443", "chat", cert)
	lb := startUpgradable(t, tp.LB, strings.Replace(sniConfig, "@MORE@", "", 1))
	ws := wss(t, tp, "api.example.test", roots)
	if ws.Backend != "api" {
		t.Fatalf("wss://api.example.test reached %q", ws.Backend)
	}
	pid, _ := lb.upgradeOK(t)
	select {
	case <-lb.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the old l4lb did not exit after the upgrade")
	}
	for i := range 3 {
		if err := ws.Echo(fmt.Appendf(nil, "after the upgrade #%d", i), time.Now().Add(5*time.Second)); err != nil {
			t.Fatalf("the routed WebSocket after the upgrade: %v", err)
		}
	}
	st := lb.status(t)
	if st.Process.PID != pid || st.VIPs[0].SNI == nil {
		t.Fatalf("status after the upgrade: pid %d, %+v", st.Process.PID, st.VIPs[0].SNI)
	}
	if bs := st.VIPs[0].SNI.Routes[0].Backends; len(bs) != 1 || bs[0].ID != "api0" || bs[0].LiveFlows != 1 {
		t.Fatalf("route api after the upgrade: %+v", bs)
	}
}
