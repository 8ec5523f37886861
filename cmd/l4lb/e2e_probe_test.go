// End-to-end tests of the dns and tls check types through the daemon:
// real DNS servers (miekg/dns) and real TLS servers (crypto/tls) in the
// backends' namespaces, a plain TCP server where TLS is expected.

package main

import (
	"crypto/tls"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// queryVIP asks the VIP for name from the client's namespace and returns
// the answer's rcode and A records.
func queryVIP(t *testing.T, tp *testutil.Topology, name string) (int, []string) {
	t.Helper()
	var r *dns.Msg
	c := &dns.Client{Timeout: 3 * time.Second}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	tp.Client.MustDo(t, func() (err error) {
		r, _, err = c.Exchange(q, netip.AddrPortFrom(tp.VIP, 53).String())
		return err
	})
	var as []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			as = append(as, a.A.String())
		}
	}
	return r.Rcode, as
}

// TestDNSCheckThroughVIP: a udp VIP over two DNS servers with dns
// checks for db.example.test. The server that does not know the name
// (NXDOMAIN) is down with that reason and gets no client query; once it
// knows the name it comes up; a server that stops answering goes down
// ("timeout") and every client query of the run is still answered
// NOERROR, by the other.
func TestDNSCheckThroughVIP(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	var srv [2]*testutil.DNSServer
	for i := range srv {
		srv[i] = testutil.StartDNSServer(t, tp.Backends[i], tp.BackendIP(i).String()+":53")
		srv[i].SetHost("client.example.test", 30, netip.MustParseAddr("198.18.9.9"))
	}
	srv[0].SetHost("db.example.test", 30, netip.MustParseAddr("198.18.9.1"))
	cfg := newConf().vip("dns", ":53", `protocol = "udp"`, `session_timeout = "1s"`).
		health(`type = "dns"`, `dns_name = "db.example.test"`, `interval = "300ms"`, `timeout = "300ms"`, "rise = 2", "fall = 2").
		backends(2, 53).String()
	lb := startLB(t, tp, cfg)
	lb.waitHealth(t, "dns", "be0", "up")
	lb.waitHealth(t, "dns", "be1", "down")
	if r := lb.backend(t, "dns", "be1").Reason; !strings.Contains(r, "rcode NXDOMAIN for db.example.test. A") {
		t.Fatalf("be1 down for %q, want the NXDOMAIN", r)
	}
	ask := func(n int) {
		t.Helper()
		for range n {
			rcode, as := queryVIP(t, tp, "client.example.test")
			if rcode != dns.RcodeSuccess || len(as) != 1 || as[0] != "198.18.9.9" {
				t.Fatalf("client query through the VIP: rcode %d answers %v", rcode, as)
			}
		}
	}
	ask(20)
	if f := lb.backend(t, "dns", "be1").Flows; f != 0 {
		t.Fatalf("be1 (down) got %d client sessions", f)
	}

	srv[1].SetHost("db.example.test", 30, netip.MustParseAddr("198.18.9.2"))
	lb.waitStatus(t, 10*time.Second, "be1 up once it knows the name", func(st plane.Status) bool {
		return backendOf(st, "dns", "be1").Health == "up"
	})
	srv[0].SetSilent(true)
	lb.waitStatus(t, 10*time.Second, "be0 down when silent", func(st plane.Status) bool {
		b := backendOf(st, "dns", "be0")
		return b.Health == "down" && strings.Contains(b.Reason, "timeout after 300ms waiting for a reply")
	})
	before := lb.backend(t, "dns", "be1").Flows
	ask(20)
	if f := lb.backend(t, "dns", "be1").Flows; f < before+1 {
		t.Fatalf("be1 flows %d -> %d: the queries did not go to the server that answers", before, f)
	}
}

// TestTLSCheckThroughVIP: a tcp VIP with tls checks (server name
// db.example.test) over a TLS server and a plain TCP echo server. The
// plain one is down (its reply is no ServerHello) and the TLS one up;
// TLS clients through the VIP all complete their handshake, with the
// certificate for db.example.test.
func TestTLSCheckThroughVIP(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	cert, pool := testutil.SelfSignedTLS(t, "db.example.test")
	var names = make(chan string, 256)
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		select {
		case names <- h.ServerName:
		default:
		}
		return nil, nil
	}}
	var ln [2]net.Listener
	for i := range ln {
		tp.Backends[i].MustDo(t, func() (err error) { ln[i], err = net.Listen("tcp", tp.BackendIP(i).String()+":8443"); return err })
		t.Cleanup(func() { _ = ln[i].Close() })
	}
	testutil.ServeConns(tls.NewListener(ln[0], conf), testutil.NamedEcho("be0"))
	testutil.ServeConns(ln[1], testutil.Echo) // plain TCP: echoes the ClientHello back
	cfg := newConf().vip("tls", ":443").
		health(`type = "tls"`, `tls_server_name = "db.example.test"`, `interval = "300ms"`, `timeout = "300ms"`, "rise = 1", "fall = 1").
		backends(2, 8443).String()
	lb := startLB(t, tp, cfg)
	lb.waitHealth(t, "tls", "be0", "up")
	lb.waitHealth(t, "tls", "be1", "down")
	if r := lb.backend(t, "tls", "be1").Reason; r == "" {
		t.Fatal("be1 down without a reason")
	}
	t.Logf("plain TCP backend down: %s", lb.backend(t, "tls", "be1").Reason)
	select {
	case n := <-names:
		if n != "db.example.test" {
			t.Fatalf("the check's ClientHello carried %q", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no check reached the TLS server")
	}
	for i := range 10 {
		var c *tls.Conn
		tp.Client.MustDo(t, func() (err error) {
			d := &net.Dialer{Timeout: 3 * time.Second}
			c, err = tls.DialWithDialer(d, "tcp", netip.AddrPortFrom(tp.VIP, 443).String(), &tls.Config{ServerName: "db.example.test", RootCAs: pool})
			return err
		})
		line := make([]byte, 4)
		if _, err := c.Read(line); err != nil || string(line) != "be0\n" {
			t.Fatalf("client %d: %q %v", i, line, err)
		}
		c.Close()
	}
	if f := lb.backend(t, "tls", "be1").Flows; f != 0 {
		t.Fatalf("the plain backend got %d connections", f)
	}
}

// TestUDPCheckThroughVIP: a udp VIP with udp checks (send "ping",
// expect "pong") over two UDP servers: the one that answers "pong" is
// up, the one that answers something else is down with the reply as the
// reason, and every client datagram through the VIP is answered by the
// first.
func TestUDPCheckThroughVIP(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	for i, answer := range []string{"pong from be0", "nope"} {
		var pc *net.UDPConn
		tp.Backends[i].MustDo(t, func() (err error) {
			pc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(tp.BackendIP(i), 7000)))
			return err
		})
		t.Cleanup(func() { _ = pc.Close() })
		go testutil.ServeDatagrams(pc, func([]byte) []byte { return []byte(answer) })
	}
	cfg := newConf().vip("udp", ":7000", `protocol = "udp"`, `session_timeout = "1s"`).
		health(`type = "udp"`, `send = "ping"`, `expect = "pong"`, `interval = "300ms"`, `timeout = "300ms"`, "rise = 1", "fall = 1").
		backends(2, 7000).String()
	lb := startLB(t, tp, cfg)
	lb.waitHealth(t, "udp", "be0", "up")
	lb.waitHealth(t, "udp", "be1", "down")
	if r := lb.backend(t, "udp", "be1").Reason; r != `reply "nope" does not start with "pong"` {
		t.Fatalf("be1 down for %q", r)
	}
	for i := range 10 {
		var c net.Conn
		tp.Client.MustDo(t, func() (err error) {
			c, err = net.Dial("udp", netip.AddrPortFrom(tp.VIP, 7000).String())
			return err
		})
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 64)
		_, err := c.Write([]byte("hello"))
		n, rerr := c.Read(buf)
		c.Close()
		if err != nil || rerr != nil || string(buf[:n]) != "pong from be0" {
			t.Fatalf("client %d: %q %v %v", i, buf[:n], err, rerr)
		}
	}
	if f := lb.backend(t, "udp", "be1").Flows; f != 0 {
		t.Fatalf("the failing backend got %d sessions", f)
	}
}
