package reconcile

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// startTLSNamed is a loopback TLS server (TLS ends there) that writes its
// name after the handshake, then echoes.
func startTLSNamed(t *testing.T, name string) netip.AddrPort {
	t.Helper()
	cert, _ := testutil.SelfSignedTLS(t, "example.com")
	ln := testutil.ListenLoopback(t)
	t.Cleanup(func() { ln.Close() })
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	named := testutil.NamedEcho(name)
	testutil.ServeConns(ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		tc := tls.Server(c, cfg)
		if tc.Handshake() == nil {
			named(tc)
		}
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// tlsName does a TLS handshake with SNI name through addr and returns the
// name of the server that answered; the connection stays open.
func tlsName(t *testing.T, addr netip.AddrPort, sni string) (string, *tls.Conn) {
	t.Helper()
	c, err := net.DialTimeout("tcp4", addr.String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake %q: %v", sni, err)
	}
	buf := make([]byte, 64)
	n, err := tc.Read(buf)
	if err != nil {
		t.Fatalf("read %q: %v", sni, err)
	}
	return string(buf[:n-1]), tc
}

const sniVIP = `
[global]
admin_socket = "off"
[[vip]]
name = "tls"
listen = "%s"
  [vip.health]
  type = "none"
  [[vip.backend]]
  name = "def"
  address = "%s"
%s`

func routeTOML(name, names, backends string) string {
	return fmt.Sprintf("  [[vip.route]]\n  name = %q\n  names = %s\n%s", name, names, backends)
}

func routeBackend(name string, a netip.AddrPort) string {
	return fmt.Sprintf("    [[vip.route.backend]]\n    name = %q\n    address = %q\n", name, a)
}

// TestRoutesReload: routes start with the VIP, status shows them; a
// reload adds a route, changes one's backends and removes another, and
// connections open through each keep going.
func TestRoutesReload(t *testing.T) {
	def, a1, a2, b1 := startTLSNamed(t, "def"), startTLSNamed(t, "a1"), startTLSNamed(t, "a2"), startTLSNamed(t, "b1")
	vip := testutil.FreeTCPAddr(t)
	first := fmt.Sprintf(sniVIP, vip, def, routeTOML("a", `["a.example.com"]`, routeBackend("a1", a1))+routeTOML("b", `["*.b.example.com"]`, routeBackend("b1", b1)))
	rt := startRuntime(t, first)
	for sni, want := range map[string]string{"a.example.com": "a1", "x.b.example.com": "b1", "c.example.com": "def", "": "def"} {
		if got, _ := tlsName(t, vip, sni); got != want {
			t.Errorf("%q reached %q, want %q", sni, got, want)
		}
	}
	_, openA := tlsName(t, vip, "a.example.com")
	_, openB := tlsName(t, vip, "y.b.example.com")

	st := sniVIPStatus(t, rt, "tls")
	if st.SNI == nil || len(st.SNI.Routes) != 2 || st.SNI.Routes[0].Name != "a" || st.SNI.Routes[0].Routed != 2 ||
		len(st.SNI.Routes[0].Backends) != 1 || st.SNI.Routes[0].Backends[0].ID != "a1" || st.SNI.Default != 2 || st.SNI.NoMatchCount != 2 {
		t.Fatalf("status: %+v", st.SNI)
	}

	// Route a moves to a2, b goes, c comes.
	apply(t, rt, fmt.Sprintf(sniVIP, vip, def, routeTOML("a", `["a.example.com"]`, routeBackend("a2", a2))+routeTOML("c", `["c.example.com"]`, routeBackend("b1", b1))))
	for sni, want := range map[string]string{"a.example.com": "a2", "c.example.com": "b1", "x.b.example.com": "def"} {
		if got, _ := tlsName(t, vip, sni); got != want {
			t.Errorf("after the reload %q reached %q, want %q", sni, got, want)
		}
	}
	for _, c := range []*tls.Conn{openA, openB} {
		c.Write([]byte("still\n"))
		buf := make([]byte, 6)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "still\n" {
			t.Fatalf("a connection routed before the reload: %q, %v", buf, err)
		}
	}
	st = sniVIPStatus(t, rt, "tls")
	var names []string
	for _, r := range st.SNI.Routes {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "a,c" || st.SNI.Routes[0].Routed != 3 {
		t.Fatalf("routes after the reload: %v, %+v", names, st.SNI.Routes)
	}
	// Without routes the VIP takes every connection itself.
	apply(t, rt, fmt.Sprintf(sniVIP, vip, def, ""))
	if got, _ := tlsName(t, vip, "a.example.com"); got != "def" {
		t.Fatalf("routes removed: a.example.com reached %q", got)
	}
	if st := sniVIPStatus(t, rt, "tls"); st.SNI != nil {
		t.Fatalf("status still shows routes: %+v", st.SNI)
	}
}

// TestRouteHealth: a route's backends have their own health targets; a
// dead one leaves the route's snapshot, the other serves.
func TestRouteHealth(t *testing.T) {
	def, a1 := startTLSNamed(t, "def"), startTLSNamed(t, "a1")
	dead := testutil.FreeTCPAddr(t) // nothing listens
	vip := testutil.FreeTCPAddr(t)
	rt := startRuntime(t, fmt.Sprintf(sniVIP, vip, def, routeTOML("a", `["a.example.com"]`,
		"    [vip.route.health]\n    type = \"tcp\"\n    interval = \"100ms\"\n    timeout = \"50ms\"\n    fall = 1\n"+
			routeBackend("a1", a1)+routeBackend("dead", dead))))
	testutil.Eventually(t, 5*time.Second, "the dead route backend marked down", func() bool {
		st := sniVIPStatus(t, rt, "tls")
		for _, b := range st.SNI.Routes[0].Backends {
			if b.ID == "dead" {
				return b.Health == "down" && st.SNI.Routes[0].Eligible == 1
			}
		}
		return false
	})
	for range 4 {
		if got, _ := tlsName(t, vip, "a.example.com"); got != "a1" {
			t.Fatalf("a.example.com reached %q with dead down", got)
		}
	}
	// The VIP's own backend has health none: its own check is untouched.
	if b, _ := backendStatus(rt, "tls", "def"); b.Health == "down" {
		t.Fatalf("default backend: %+v", b)
	}
}

func sniVIPStatus(t *testing.T, rt *Runtime, name string) plane.VIPStatus {
	t.Helper()
	for _, v := range rt.Status().VIPs {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no VIP %q in status", name)
	return plane.VIPStatus{}
}
