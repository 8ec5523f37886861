// Access control and per-client limits through the daemon, in namespaces:
// clients at several source addresses of the client namespace.

package main

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

var guardVIPs = newConf().raw("\n[defaults]\ndeny = [\"198.18.0.66\"]\n").
	vip("acl", ":80", `allow = ["198.18.0.0/24"]`, `deny = ["198.18.0.64/27"]`).addrs(7000, 0, 1).
	vip("percli", ":81", `max_conns_per_client = 2`).addrs(7000, 0).
	vip("rate", ":82", `conn_rate_per_client = 3`).addrs(7000, 1).
	vip("udp", ":53", `protocol = "udp"`, `max_sessions_per_client = 1`).addrs(5300, 0).String()

// TestAccessAndClientLimitsThroughDaemon: allow/deny (the VIP's own lists
// and a [defaults] deny) reset refused clients before any backend is
// reached; max_conns_per_client and max_sessions_per_client refuse a
// client over its limit and no other; status counts each refusal.
func TestAccessAndClientLimitsThroughDaemon(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	for _, a := range []string{"198.18.0.3", "198.18.0.4", "198.18.0.66", "198.18.0.70"} {
		tp.Client.MustExec(t, "ip", "addr", "add", a+"/24", "dev", "c0")
	}
	for i := range 2 {
		namedEcho(t, tp, i, 7000)
	}
	udpNamedEcho(t, tp, 0, 5300)
	lb := startLB(t, tp, guardVIPs)
	from := func(src string, port int) (*clientConn, error) { // a connection from src in the client namespace
		return dialVIPFrom(tp, netip.MustParseAddr(src), port, 3*time.Second)
	}

	// allow/deny: 198.18.0.66 and .70 are in the VIP's denied /27 (its
	// own deny list replaces the one in [defaults]), 198.18.0.3 allowed.
	c, err := from("198.18.0.3", 80)
	if err != nil {
		t.Fatalf("allowed client: %v", err)
	}
	if err := c.echo("in"); err != nil {
		t.Fatalf("allowed client: %v", err)
	}
	c.Close()
	for _, src := range []string{"198.18.0.70", "198.18.0.66"} {
		if _, err := from(src, 80); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("denied client %s: %v, want ECONNRESET", src, err)
		}
	}
	// The [defaults] deny applies where the VIP has no list of its own.
	if _, err := from("198.18.0.66", 81); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("client denied by [defaults] on VIP percli: %v, want ECONNRESET", err)
	}

	// max_conns_per_client = 2 on percli.
	var held []*clientConn
	for range 2 {
		c, err := from("198.18.0.3", 81)
		if err != nil {
			t.Fatalf("connection within the per-client limit: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		held = append(held, c)
	}
	if _, err := from("198.18.0.3", 81); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("third connection of a client limited to 2: %v, want ECONNRESET", err)
	}
	other, err := from("198.18.0.4", 81)
	if err != nil {
		t.Fatalf("another client: %v", err)
	}
	other.Close()
	for _, c := range held {
		if err := c.echo("held"); err != nil {
			t.Fatalf("a held connection: %v", err)
		}
	}

	// conn_rate_per_client = 3: of 8 connections at once, 3 pass (plus
	// one per 333 ms the burst takes); another client is not held back.
	passed, reset := 0, 0
	for range 8 {
		c, err := from("198.18.0.4", 82)
		switch {
		case err == nil:
			passed++
			c.Close()
		case errors.Is(err, syscall.ECONNRESET):
			reset++
		default:
			t.Fatalf("conn_rate_per_client: neither served nor reset: %v", err)
		}
	}
	if passed < 3 || passed > 5 || reset < 3 {
		t.Errorf("conn_rate_per_client 3: %d of 8 served, %d reset", passed, reset)
	}
	if c, err := from("198.18.0.3", 82); err != nil {
		t.Errorf("another client held back by a rate limit not its own: %v", err)
	} else {
		c.Close()
	}

	// max_sessions_per_client = 1 on the UDP VIP: a second source port of
	// the same client gets nothing; another client does.
	if _, err := udpFromIn(tp, "198.18.0.3", 53, "one"); err != nil {
		t.Fatalf("first session: %v", err)
	}
	if reply, err := udpFromIn(tp, "198.18.0.3", 53, "two"); err == nil {
		t.Errorf("second session of a client limited to 1 got %q", reply)
	}
	if _, err := udpFromIn(tp, "198.18.0.4", 53, "other"); err != nil {
		t.Fatalf("another client's session: %v", err)
	}

	st := lb.status(t)
	if v := mustVIP(t, st, "acl"); v.Denied != 2 {
		t.Errorf("acl: denied %d, want 2", v.Denied)
	}
	if v := mustVIP(t, st, "percli"); v.Denied != 1 || v.ClientLimited != 1 {
		t.Errorf("percli: denied %d, client_limited %d; want 1, 1", v.Denied, v.ClientLimited)
	}
	if v := mustVIP(t, st, "rate"); v.ClientLimited != uint64(reset) {
		t.Errorf("rate: client_limited %d, want %d", v.ClientLimited, reset)
	}
	if v := mustVIP(t, st, "udp"); v.ClientLimited != 1 {
		t.Errorf("udp: client_limited %d, want 1", v.ClientLimited)
	}
	flows := uint64(0)
	for _, b := range mustVIP(t, st, "acl").Backends {
		flows += b.Flows
	}
	if flows != 1 {
		t.Errorf("acl backends took %d flows, want 1 (refused clients must reach no backend)", flows)
	}
}

// udpFromIn sends msg from src (a fresh port) in the client namespace to
// the VIP's port and returns the reply, waiting at most a second.
func udpFromIn(tp *testutil.Topology, src string, port int, msg string) (string, error) {
	var reply string
	err := tp.Client.Do(func() error {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)}, &net.UDPAddr{IP: tp.VIP.AsSlice(), Port: port})
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		reply = string(buf[:n])
		return nil
	})
	return reply, err
}
