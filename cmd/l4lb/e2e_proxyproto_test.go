// PROXY protocol through the daemon: the header l4lb sends, read by a
// real consumer (nginx's proxy_protocol listener reports the client it
// saw), and the header l4lb accepts from a balancer in front (another
// l4lb), over IPv4 and IPv6.

package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// IPv6 beside the standard topology's IPv4 (documentation range).
var (
	client6 = netip.MustParseAddr("2001:db8:20::2")
	vip6    = netip.MustParseAddr("2001:db8:22::10")
)

func backend6(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x21, 15: byte(0x11 + i)})
}

// addIPv6 gives the topology IPv6: client 2001:db8:20::2, the balancer
// 2001:db8:20::1 and 2001:db8:21::1 (toward the backends), the VIP
// 2001:db8:22::10 on its lo, backend i 2001:db8:21::(11+i).
func addIPv6(t *testing.T, tp *testutil.Topology) {
	t.Helper()
	run := func(ns *testutil.Netns, cmds ...string) {
		for _, c := range cmds {
			ns.MustExec(t, append([]string{"ip", "-6"}, strings.Fields(c)...)...)
		}
	}
	run(tp.Client, "addr add 2001:db8:20::2/64 dev c0 nodad", "route add default via 2001:db8:20::1")
	run(tp.LB, "addr add 2001:db8:20::1/64 dev x0 nodad", "addr add 2001:db8:21::1/64 dev br0 nodad", "addr add 2001:db8:22::10/128 dev lo nodad")
	for i, b := range tp.Backends {
		run(b, fmt.Sprintf("addr add %s/64 dev b0 nodad", backend6(i)), "route add default via 2001:db8:21::1")
	}
}

// startNginx runs nginx in backend i's namespace, one process (no
// master, no daemon) killed by its PID at the end: port 8080 on both
// addresses with proxy_protocol; GET /who answers the PROXY header's
// client address and port, GET /big a random file of size bytes, whose
// checksum it returns.
func startNginx(t *testing.T, tp *testutil.Topology, i int, size int64) [32]byte {
	t.Helper()
	testutil.RequireTool(t, "nginx")
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(www, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen %[2]s:8080 proxy_protocol;
    listen [%[3]s]:8080 proxy_protocol;
    root %[1]s/www;
    location = /who { default_type text/plain; return 200 "$proxy_protocol_addr $proxy_protocol_port\n"; }
  }
}
`, dir, tp.BackendIP(i), backend6(i))
	cf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := tp.Backends[i].Command("nginx", "-e", filepath.Join(dir, "error.log"), "-p", dir, "-c", cf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx output:\n%s\nerror.log:\n%s", out.String(), log)
		}
	})
	testutil.Eventually(t, 10*time.Second, "nginx listens", func() bool {
		return tp.Backends[i].Do(func() error {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:8080", tp.BackendIP(i)), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}) == nil
	})
	return sha256.Sum256(data)
}

// httpGet sends GET path from the client namespace to addr and returns
// the body and the client's own address.
func httpGet(t *testing.T, tp *testutil.Topology, addr netip.AddrPort, path string) (body []byte, local netip.AddrPort) {
	t.Helper()
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp", addr.String(), 5*time.Second)
		return err
	})
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: l4lb\r\n\r\n", path)
	r := bufio.NewReader(c)
	status, err := r.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("GET %s via %s: %q, %v", path, addr, status, err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	body, err = io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return body, c.LocalAddr().(*net.TCPAddr).AddrPort()
}

// wantClient checks nginx's /who answer against the client's address.
func wantClient(t *testing.T, body []byte, client netip.AddrPort) {
	t.Helper()
	want := fmt.Sprintf("%s %d\n", client.Addr().Unmap(), client.Port())
	if string(body) != want {
		t.Fatalf("nginx saw client %q, want %q", body, want)
	}
}

var sendProxyConfig = func() string {
	c := newConf()
	for _, v := range []struct{ name, listen, backend string }{
		{"4", ":", "198.18.1.11:8080"}, {"6", "[2001:db8:22::10]:", "[2001:db8:21::11]:8080"},
	} {
		for i, pp := range []string{"v1", "v2"} {
			c.vip(pp+"-"+v.name, fmt.Sprintf("%s%d", v.listen, 81+i), fmt.Sprintf("proxy_protocol = %q", pp)).backend(fmt.Sprintf("address = %q", v.backend))
		}
	}
	return c.String()
}()

// TestProxyProtocolToNginx: nginx behind l4lb reports the real client's
// address and port from l4lb's v1 and v2 headers, IPv4 and IPv6, and a
// large response after the header arrives byte-exact.
func TestProxyProtocolToNginx(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	addIPv6(t, tp)
	const size = 8 << 20
	sum := startNginx(t, tp, 0, size)
	startLB(t, tp, sendProxyConfig)
	for _, vip := range []netip.Addr{tp.VIP, vip6} {
		for _, port := range []uint16{81, 82} {
			addr := netip.AddrPortFrom(vip, port)
			body, local := httpGet(t, tp, addr, "/who")
			wantClient(t, body, local)
			if body, _ := httpGet(t, tp, addr, "/big"); len(body) != size || sha256.Sum256(body) != sum {
				t.Fatalf("via %s: %d bytes, checksum differs or size", addr, len(body))
			}
		}
	}
}

// The balancer in front (l4lb B, in the balancer namespace) sends v2 to
// l4lb A in backend 0's namespace, which accepts it only from B and sends
// v1 on to nginx in backend 1's namespace.
var frontConfig = newConf().
	vip("front4", ":83", `proxy_protocol = "v2"`).health(`type = "none"`).addrs(9000, 0).
	vip("front6", "[2001:db8:22::10]:83", `proxy_protocol = "v2"`).health(`type = "none"`).addrs(9000, 0).String()

var innerConfig = newConf(`log_format = "json"`).
	vip("inner", "198.18.1.11:9000", `accept_proxy_protocol = "v2"`, `accept_proxy_protocol_from = ["198.18.1.1"]`, `proxy_protocol = "v1"`,
		`connect_timeout = "500ms"`, `log_connections = true`).addrs(8080, 1).String()

// TestAcceptProxyProtocolBehindL4LB: the original client, IPv4 and IPv6,
// reaches nginx through two l4lbs, and A's connection log names it; a
// client that reaches A directly (untrusted) is reset, counted and never
// forwarded.
func TestAcceptProxyProtocolBehindL4LB(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	addIPv6(t, tp)
	startNginx(t, tp, 1, 1<<20)
	inner := startLBIn(t, tp.Backends[0], innerConfig)
	startLB(t, tp, frontConfig)
	for _, vip := range []netip.Addr{tp.VIP, vip6} {
		body, local := httpGet(t, tp, netip.AddrPortFrom(vip, 83), "/who")
		wantClient(t, body, local)
		inner.waitLog(t, fmt.Sprintf(`"client":"%s"`, local))
	}
	v2 := append([]byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c"), 1, 2, 3, 4, 198, 18, 1, 11, 0, 1, 0x23, 0x28)
	// A client straight to A (untrusted); from the balancer's address (trusted):
	// plain HTTP (malformed), half a header (timeout, after 500ms).
	for _, tc := range []struct {
		ns   *testutil.Netns
		send []byte
		end  string
		wait time.Duration
	}{
		{tp.Client, v2, "proxy_untrusted", 0},
		{tp.LB, []byte("GET /who HTTP/1.0\r\n\r\n"), "proxy_malformed", 0},
		{tp.LB, v2[:20], "proxy_timeout", 500 * time.Millisecond},
	} {
		start := time.Now()
		if err := sendToInner(tc.ns, tc.send); !isConnReset(err) {
			t.Fatalf("%s: %v, want a reset", tc.end, err)
		}
		if time.Since(start) < tc.wait {
			t.Fatalf("%s: reset after %v", tc.end, time.Since(start))
		}
		inner.waitLog(t, fmt.Sprintf(`"end":"%s"`, tc.end))
	}
	inner.waitLog(t, "PROXY header refused")
	out, _, _ := inner.run(t, "status")
	if !strings.Contains(out, "proxy headers refused: untrusted 1  malformed 1  timeout 1") {
		t.Fatalf("status does not count the refusals:\n%s", out)
	}
}

// sendToInner connects from ns to l4lb A, sends b, and reads until the
// connection ends: the error says how.
func sendToInner(ns *testutil.Netns, b []byte) (err error) {
	ns.Do(func() error {
		c, derr := net.DialTimeout("tcp4", "198.18.1.11:9000", 5*time.Second)
		if derr != nil {
			err = derr
			return nil
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err = c.Write(b); err != nil {
			return nil // reset already: the write took the error
		}
		var got []byte
		got, err = io.ReadAll(c)
		if len(got) > 0 {
			err = fmt.Errorf("forwarded: read %q", got)
		}
		return nil
	})
	return err
}

// isConnReset: the error a reset gives the first read or write after it
// (EPIPE would come only from a second write; a FIN reads as EOF).
func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET)
}

// startHAProxy runs HAProxy in the balancer namespace (foreground, one
// process killed by its PID at the end): port 84 sends a v1 header
// (send-proxy) to l4lb A, port 85 a v2 one (send-proxy-v2), on the VIP's
// IPv4 and IPv6 addresses.
func startHAProxy(t *testing.T, tp *testutil.Topology) {
	t.Helper()
	testutil.RequireTool(t, "haproxy")
	dir := t.TempDir()
	conf := fmt.Sprintf(`global
  pidfile %[1]s/haproxy.pid
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
listen v1
  bind %[2]s:84
  bind [%[3]s]:84
  server a 198.18.1.11:9000 send-proxy
listen v2
  bind %[2]s:85
  bind [%[3]s]:85
  server a 198.18.1.11:9000 send-proxy-v2
`, dir, tp.VIP, vip6)
	cf := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := tp.LB.Command("haproxy", "-db", "-f", cf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("haproxy output:\n%s", out.String())
		}
	})
	testutil.Eventually(t, 10*time.Second, "haproxy listens", func() bool {
		return tp.LB.Do(func() error {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:85", tp.VIP), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}) == nil
	})
}

// TestAcceptProxyProtocolBehindHAProxy: l4lb A accepts HAProxy's v1 and
// v2 headers ("any"), IPv4 and IPv6 clients, and nginx behind A sees the
// original client.
func TestAcceptProxyProtocolBehindHAProxy(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	addIPv6(t, tp)
	startNginx(t, tp, 1, 1<<10)
	startLBIn(t, tp.Backends[0], strings.Replace(innerConfig, `accept_proxy_protocol = "v2"`, `accept_proxy_protocol = "any"`, 1))
	startHAProxy(t, tp)
	for _, vip := range []netip.Addr{tp.VIP, vip6} {
		for _, port := range []uint16{84, 85} {
			body, local := httpGet(t, tp, netip.AddrPortFrom(vip, port), "/who")
			wantClient(t, body, local)
		}
	}
}
