// udp_test.go: the udp and dns checks against real UDP servers on loopback.

package health

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// startUDP answers each datagram with reply(payload); nil: no answer.
func startUDP(t *testing.T, reply func([]byte) []byte) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if out := reply(buf[:n]); out != nil {
				_, _ = pc.WriteToUDPAddrPort(out, from)
			}
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// closedUDPPort returns a loopback UDP port where nothing listens.
func closedUDPPort(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	a := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	_ = pc.Close()
	return a
}

func TestUDPCheck(t *testing.T) {
	echo := startUDP(t, func(b []byte) []byte { return append([]byte("ECHO "), b...) })
	mute := startUDP(t, func([]byte) []byte { return nil })
	cases := []struct {
		name string
		spec Spec
		addr netip.AddrPort
		want string // "" = pass
	}{
		{"any reply", Spec{Send: []byte("ping")}, echo, ""},
		{"prefix", Spec{Send: []byte("ping"), Expect: []byte("ECHO pi")}, echo, ""},
		{"regex", Spec{Send: []byte("n=42"), ExpectRegex: `^ECHO n=\d+$`}, echo, ""},
		{"prefix mismatch", Spec{Send: []byte("ping"), Expect: []byte("PONG")}, echo, `reply "ECHO ping" does not start with "PONG"`},
		{"regex mismatch", Spec{Send: []byte("x"), ExpectRegex: `^OK`}, echo, `reply "ECHO x" does not match ^OK`},
		{"silent", Spec{Send: []byte("ping"), Timeout: 300 * time.Millisecond}, mute, "timeout after 300ms waiting for a reply"},
		{"port unreachable", Spec{Send: []byte("ping")}, closedUDPPort(t), "port unreachable (ICMP)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.spec.Type = l4.CheckUDP
			r := check(t, c.spec, c.addr)
			if c.want != "" {
				wantFail(t, r, c.want)
				return
			}
			if !r.OK || r.FirstByte <= 0 || r.Took < r.FirstByte {
				t.Fatalf("want a pass with a first-byte time, got %+v", r)
			}
		})
	}
}

func TestDNSCheck(t *testing.T) {
	srv := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	srv.SetHost("db.example.test", 30, netip.MustParseAddr("198.18.9.1"))
	cases := []struct {
		name  string
		qname string
		qtype uint16
		want  string
	}{
		{"A", "db.example.test", 0, ""},
		{"no AAAA record is still NOERROR", "DB.example.test.", dns.TypeAAAA, ""},
		{"nxdomain", "gone.example.test", 0, "rcode NXDOMAIN for gone.example.test. A"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := check(t, Spec{Type: l4.CheckDNS, DNSName: c.qname, DNSType: c.qtype}, srv.Addr)
			if c.want != "" {
				wantFail(t, r, c.want)
				return
			}
			if !r.OK || r.FirstByte <= 0 {
				t.Fatalf("want a pass with a first-byte time, got %+v", r)
			}
		})
	}
	t.Run("silent server", func(t *testing.T) {
		srv.SetSilent(true)
		defer srv.SetSilent(false)
		r := check(t, Spec{Type: l4.CheckDNS, DNSName: "db.example.test", Timeout: 300 * time.Millisecond}, srv.Addr)
		wantFail(t, r, "timeout after 300ms waiting for a reply")
	})
}

// TestDNSCheckMatchesID: a reply with another ID (a late answer to an
// earlier probe, a spoof) is not taken for the answer, even a SERVFAIL;
// the one with the query's ID, sent after it, decides.
func TestDNSCheckMatchesID(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			var q dns.Msg
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			r := new(dns.Msg)
			r.SetReply(&q)
			wrong := r.Copy()
			wrong.Id = q.Id ^ 0x5555
			wrong.Rcode = dns.RcodeServerFailure
			for _, m := range []*dns.Msg{wrong, r} {
				b, _ := m.Pack()
				_, _ = pc.WriteToUDPAddrPort(b, from)
			}
		}
	}()
	r := check(t, Spec{Type: l4.CheckDNS, DNSName: "x.test"}, pc.LocalAddr().(*net.UDPAddr).AddrPort())
	if !r.OK {
		t.Fatalf("check failed: %s", r.Reason)
	}
}
