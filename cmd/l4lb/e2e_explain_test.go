// `l4lb explain` against the real daemon: a proxy VIP (the explained
// backend is where the client's next connection lands, a drain moves it),
// and an xdp VIP in the one-arm DSR network (a flow from the explained
// client address and port lands on the explained backend; while it lives,
// explain shows its conntrack entry).

package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// explainJSON runs `l4lb explain --json` and decodes the answer.
func explainJSON(t *testing.T, lb *lbProcess, args ...string) plane.Explanation {
	t.Helper()
	var e plane.Explanation
	out := lb.verb(t, "explain", append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("explain --json: %v\n%s", err, out)
	}
	return e
}

var vipMaglev = newConf().vip("a", ":80", `algorithm = "maglev"`).health(`type = "none"`).backends(3, 7000).String()

func TestExplainProxyVIP(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	lb := startLB(t, tp, vipMaglev)
	client := tp.ClientIP.String()

	out := lb.verb(t, "explain", "a", client)
	for _, want := range []string{
		"vip a (tcp/198.18.2.10:80, proxy, maglev, hash on the source address)",
		"client 198.18.0.2 (flow tcp 198.18.0.2:*->198.18.2.10:80)",
		"pinned: none (no established connection from 198.18.0.2)",
		"of 65537 (table generation 1) -> be",
		"candidates:\n  be0 (198.18.1.11:7000) unknown weight 100, live 0",
		"backend: be",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("explain lacks %q:\n%s", want, out)
		}
	}
	e := explainJSON(t, lb, "a", client)
	if e.Backend == nil {
		t.Fatalf("no backend: %+v", e)
	}
	chosen := e.Backend.ID
	for range 3 {
		if got := mustDialVIP(t, tp, 80).backend; got != chosen {
			t.Fatalf("explained %s, the connection reached %s", chosen, got)
		}
	}
	// Drained: not a candidate, and the client hashes elsewhere.
	if _, errOut, code := lb.run(t, "drain", "--reason", "maintenance", "a", chosen); code != 0 {
		t.Fatalf("drain: %s", errOut)
	}
	out = lb.verb(t, "explain", "a", client)
	t.Logf("after the drain:\n%s", out)
	if !strings.Contains(out, chosen+" (") || !strings.Contains(out, "NOT A CANDIDATE: drained by root: maintenance") || !strings.Contains(out, "table generation 2") {
		t.Fatalf("after the drain:\n%s", out)
	}
	e = explainJSON(t, lb, "a", client)
	if e.Backend == nil || e.Backend.ID == chosen {
		t.Fatalf("after draining %s: %+v", chosen, e.Backend)
	}
	if got := mustDialVIP(t, tp, 80).backend; got != e.Backend.ID {
		t.Fatalf("explained %s after the drain, the connection reached %s", e.Backend.ID, got)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nosuch", client}, 1, `vip "nosuch": no such VIP`},
		{[]string{"a", "198.18.0.300"}, 1, "bad client address"},
		{[]string{"a", "[2001:db8::1]:80"}, 1, "another address family"},
		{[]string{"a"}, 2, "want a VIP name and a client address"},
	} {
		_, errOut, code := lb.run(t, "explain", tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Fatalf("l4lb explain %v: exit %d\n%s\nwant exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// freePort returns a TCP port that h's address can bind now.
func freePort(t *testing.T, h *testutil.DSRHost) uint16 {
	t.Helper()
	var port uint16
	h.NS.MustDo(t, func() error {
		ln, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(h.Addr4, 0)))
		if err != nil {
			return err
		}
		port = ln.Addr().(*net.TCPAddr).AddrPort().Port()
		return ln.Close()
	})
	return port
}

// dialFromPort connects from the client's address and port to vip and
// returns the connection with the backend's name.
func dialFromPort(t *testing.T, n *xdpNet, port uint16, vip netip.AddrPort) (net.Conn, string) {
	t.Helper()
	var c net.Conn
	n.Client.NS.MustDo(t, func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(n.Client.Addr4, port))}
		c, err = d.Dial("tcp4", vip.String())
		return err
	})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	name, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("from port %d: greeting: %v", port, err)
	}
	return c, strings.TrimSpace(name)
}

// TestXDPExplain: explain reads the XDP maps; a flow from the explained
// address and port lands on the explained backend, and explain then shows
// its conntrack entry.
func TestXDPExplain(t *testing.T) {
	n := newXDPNet(t, 3)
	lb := startLBIn(t, n.LB.NS, n.config("", "", 0, 1, 2))
	client := n.Client.Addr4

	// 5tuple, the xdp default: without a port the answer depends on it.
	out := lb.verb(t, "explain", "web4", client.String())
	if !strings.Contains(out, "backend: not determined: hash_key 5tuple covers the client port") ||
		!strings.Contains(out, "vip web4 (tcp/"+n.vip4.String()+", xdp, maglev, hash on the 5-tuple)") {
		t.Fatalf("without a port:\n%s", out)
	}
	seen := map[string]bool{}
	for range 6 {
		port := freePort(t, n.Client)
		at := netip.AddrPortFrom(client, port).String()
		e := explainJSON(t, lb, "web4", at)
		if e.Backend == nil || len(e.Pinned) != 0 || e.Pick.Hash == nil || e.Pick.Hash.Maglev == nil || e.Pick.Hash.Maglev.Source != "xdp map" {
			t.Fatalf("%s before any packet: %s %+v %+v", at, e.Because, e.Pinned, e.Pick)
		}
		want := e.Backend.ID
		c, got := dialFromPort(t, n, port, n.vip4)
		if got != want {
			t.Fatalf("%s: explained %s, the flow reached %s", at, want, got)
		}
		seen[want] = true
		// Established: the conntrack entry decides.
		e = explainJSON(t, lb, "web4", at)
		if len(e.Pinned) != 1 || e.Pinned[0].Kind != "conntrack" || !e.Pinned[0].Decides || e.Pinned[0].Backend.ID != want ||
			e.Backend.ID != want || !strings.Contains(e.Because, "XDP conntrack entry") {
			t.Fatalf("%s established on %s: %s %+v", at, want, e.Because, e.Pinned)
		}
		out := lb.verb(t, "explain", "web4", at)
		t.Logf("established:\n%s", out)
		if !strings.Contains(out, "pinned:\n  conntrack tcp "+at+"->"+n.vip4.String()+" -> "+want) || !strings.Contains(out, "DECIDES") {
			t.Fatalf("established, as text:\n%s", out)
		}
		c.Close()
	}
	if len(seen) < 2 {
		t.Fatalf("six flows all on %v: the test shows little", seen)
	}
}
