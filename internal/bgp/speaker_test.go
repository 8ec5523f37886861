package bgp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	"go.uber.org/zap/zaptest"
)

// router is a second, listening GoBGP on loopback that plays the router:
// it accepts the speaker's session and records what it learns.
type router struct {
	srv  *server.BgpServer
	addr netip.Addr
	port uint16
}

func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func startRouter(t *testing.T, holdSeconds uint64) *router {
	t.Helper()
	return startRouterOn(t, netip.MustParseAddr("127.0.0.1"), holdSeconds)
}

// startRouterOn listens on addr (a loopback address); the speaker's
// session comes from 127.0.0.1.
func startRouterOn(t *testing.T, addr netip.Addr, holdSeconds uint64) *router {
	t.Helper()
	r := &router{srv: server.NewBgpServer(), addr: addr, port: freePort(t)}
	go r.srv.Serve()
	ctx := context.Background()
	err := r.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 65000, RouterId: "198.18.255.1", ListenPort: int32(r.port), ListenAddresses: []string{addr.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	err = r.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 65001},
		Transport: &api.Transport{PassiveMode: true},
		Timers:    &api.Timers{Config: &api.TimersConfig{HoldTime: holdSeconds, KeepaliveInterval: max(holdSeconds/3, 1)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.srv.StopBgp(context.Background(), &api.StopBgpRequest{})
		r.srv.Stop()
	})
	return r
}

// routes lists the prefixes the router learned, with their next hops.
func (r *router) routes(t *testing.T) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, fam := range []*api.Family{{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}, {Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}} {
		err := r.srv.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: fam}, func(d *api.Destination) {
			for _, p := range d.Paths {
				got[d.Prefix] = nextHop(p)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func nextHop(p *api.Path) string {
	for _, a := range p.Pattrs {
		var nh api.NextHopAttribute
		if a.UnmarshalTo(&nh) == nil {
			return nh.NextHop
		}
		var mp api.MpReachNLRIAttribute
		if a.UnmarshalTo(&mp) == nil && len(mp.NextHops) > 0 {
			return mp.NextHops[0]
		}
	}
	return ""
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startSpeaker(t *testing.T, r *router) *Speaker {
	t.Helper()
	s, err := Start(context.Background(), zaptest.NewLogger(t), Settings{
		ASN: 65001, RouterID: netip.MustParseAddr("198.18.255.2"),
		Communities: []uint32{65001<<16 | 100},
		Peers:       []Peer{{Address: netip.MustParseAddr("127.0.0.1"), ASN: 65000, Port: r.port}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	waitFor(t, "session established", 15*time.Second, func() bool {
		ps := s.PeerStates()
		return len(ps) == 1 && ps[0].Up
	})
	return s
}

func TestSpeakerAnnouncesAndWithdraws(t *testing.T) {
	r := startRouter(t, 9)
	s := startSpeaker(t, r)
	ctx := context.Background()
	a1, a2 := netip.MustParseAddr("198.18.10.1"), netip.MustParseAddr("198.18.10.2")
	steps := []struct {
		name string
		set  []netip.Addr
		want []string
	}{
		{"two", []netip.Addr{a1, a2, a1}, []string{"198.18.10.1/32", "198.18.10.2/32"}},
		{"one withdrawn", []netip.Addr{a2}, []string{"198.18.10.2/32"}},
		{"none", nil, nil},
		{"back", []netip.Addr{a1}, []string{"198.18.10.1/32"}},
	}
	for _, st := range steps {
		if err := s.SetAnnounced(ctx, st.set); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		waitFor(t, st.name, 10*time.Second, func() bool {
			got := r.routes(t)
			keys := make([]string, 0, len(got))
			for k, nh := range got {
				if nh != "127.0.0.1" { // the session's local address
					t.Fatalf("%s: %s next hop %q", st.name, k, nh)
				}
				keys = append(keys, k)
			}
			slices.Sort(keys)
			return slices.Equal(keys, st.want)
		})
	}
	ps := s.PeerStates()
	if ps[0].PrefixesSent != 1 || ps[0].Since.IsZero() || ps[0].State != "established" {
		t.Errorf("peer state %+v, want established, 1 prefix sent", ps[0])
	}
	if got := s.Announced(); len(got) != 1 || got[0] != netip.MustParsePrefix("198.18.10.1/32") {
		t.Errorf("Announced() = %v", got)
	}
}

// TestWithdrawAllThenFrozen: the shutdown order withdraws every route
// while the session stays up, and a late SetAnnounced (a health change
// during the drain) announces nothing again.
func TestWithdrawAllThenFrozen(t *testing.T) {
	r := startRouter(t, 9)
	s := startSpeaker(t, r)
	ctx := context.Background()
	a := netip.MustParseAddr("198.18.10.1")
	if err := s.SetAnnounced(ctx, []netip.Addr{a}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "announced", 10*time.Second, func() bool { return len(r.routes(t)) == 1 })
	if err := s.WithdrawAll(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "withdrawn", 10*time.Second, func() bool { return len(r.routes(t)) == 0 })
	if ps := s.PeerStates(); !ps[0].Up {
		t.Fatalf("session went down on withdraw: %+v", ps[0])
	}
	if err := s.SetAnnounced(ctx, []netip.Addr{a}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if got := r.routes(t); len(got) != 0 {
		t.Fatalf("announced again after WithdrawAll: %v", got)
	}
}

// TestStopClosesSession: an embedded speaker's routes vanish with it.
func TestStopClosesSession(t *testing.T) {
	r := startRouter(t, 9)
	s := startSpeaker(t, r)
	if err := s.SetAnnounced(context.Background(), []netip.Addr{netip.MustParseAddr("198.18.10.1")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "announced", 10*time.Second, func() bool { return len(r.routes(t)) == 1 })
	s.Stop()
	start := time.Now()
	waitFor(t, "routes gone after Stop", 5*time.Second, func() bool { return len(r.routes(t)) == 0 })
	t.Logf("routes gone %v after Stop", time.Since(start))
}

// TestReconfigureKeepsOtherSessions: adding and removing peers leaves the
// other sessions up and the routes announced; a change of the speaker's
// own settings asks for a restart.
func TestReconfigureKeepsOtherSessions(t *testing.T) {
	r1 := startRouter(t, 9)
	r2 := startRouterOn(t, netip.MustParseAddr("127.0.0.2"), 9)
	s := startSpeaker(t, r1)
	ctx := context.Background()
	if err := s.SetAnnounced(ctx, []netip.Addr{netip.MustParseAddr("198.18.10.1")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "announced to r1", 10*time.Second, func() bool { return len(r1.routes(t)) == 1 })
	since := s.PeerStates()[0].Since
	base := s.set
	base.Peers = nil
	p1 := Peer{Address: r1.addr, ASN: 65000, Port: r1.port}
	p2 := Peer{Address: r2.addr, ASN: 65000, Port: r2.port}

	both := base
	both.Peers = []Peer{p1, p2}
	if err := s.Reconfigure(ctx, both); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "announced to the added peer", 15*time.Second, func() bool { return len(r2.routes(t)) == 1 })
	if ps := s.PeerStates(); !ps[0].Up || !ps[0].Since.Equal(since) {
		t.Fatalf("adding a peer disturbed the first session: %+v (up since %v before)", ps[0], since)
	}

	only2 := base
	only2.Peers = []Peer{p2}
	if err := s.Reconfigure(ctx, only2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "r1's session gone", 10*time.Second, func() bool { return len(r1.routes(t)) == 0 })
	if ps := s.PeerStates(); len(ps) != 1 || !ps[0].Up || len(r2.routes(t)) != 1 {
		t.Fatalf("after removing r1: %+v, r2 routes %v", ps, r2.routes(t))
	}

	other := only2
	other.ASN = 65002
	if err := s.Reconfigure(ctx, other); !errors.Is(err, ErrRestart) {
		t.Fatalf("ASN change: %v, want ErrRestart", err)
	}
}
