// The Speaker: an embedded GoBGP server, its peers and the announced VIPs.

package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"
)

// Defaults for the zero values of Settings and Peer.
const (
	DefaultHoldTime     = 9 * time.Second
	DefaultConnectRetry = time.Second
	DefaultPort         = 179
)

// Peer is one BGP neighbour: l4lb dials it.
type Peer struct {
	Address  netip.Addr
	ASN      uint32
	Password string        // TCP MD5 signature; "" = none
	HoldTime time.Duration // 0 = Settings.HoldTime
	Port     uint16        // 0 = 179
}

// Settings are a speaker's configuration; zero values mean the defaults.
type Settings struct {
	ASN      uint32
	RouterID netip.Addr // an IPv4 address
	// NextHop of every announced route; the zero value means the local
	// address of each session.
	NextHop      netip.Addr
	Communities  []uint32      // standard communities, ASN<<16 | value
	HoldTime     time.Duration // keepalives are sent every third of it
	ConnectRetry time.Duration
	Peers        []Peer
}

// ErrRestart means new settings change the speaker itself (ASN, router id,
// next hop, communities): it must be stopped and started again.
var ErrRestart = errors.New("bgp: global settings changed, the speaker must restart")

// PeerState is one peer's session as status shows it.
type PeerState struct {
	Address      netip.Addr
	ASN          uint32
	State        string // idle, connect, active, opensent, openconfirm, established
	Up           bool
	Since        time.Time // when the session came up; zero while down
	PrefixesSent int
}

// Speaker announces host routes for a set of addresses to its peers.
type Speaker struct {
	log *zap.Logger
	srv *server.BgpServer

	mu        sync.Mutex // serialises changes; guards what follows
	set       Settings
	announced map[netip.Addr][]byte // address -> GoBGP path uuid
	frozen    bool                  // WithdrawAll ran: nothing is announced again
	stopped   bool
}

// Start runs a GoBGP server with no listening socket and dials the peers.
func Start(ctx context.Context, log *zap.Logger, set Settings) (*Speaker, error) {
	if log == nil {
		log = zap.NewNop()
	}
	set = withDefaults(set)
	if !set.RouterID.Is4() {
		return nil, fmt.Errorf("bgp: router id %v is not an IPv4 address", set.RouterID)
	}
	srv := server.NewBgpServer(server.LoggerOption(zapLogger{log: log.Named("gobgp")}))
	go srv.Serve()
	s := &Speaker{log: log, srv: srv, set: set, announced: map[netip.Addr][]byte{}}
	err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:        set.ASN,
		RouterId:   set.RouterID.String(),
		ListenPort: -1, // only dial: nothing listens on :179
	}})
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("bgp: start: %w", err)
	}
	for _, p := range set.Peers {
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(p)}); err != nil {
			s.Stop()
			return nil, fmt.Errorf("bgp: peer %v: %w", p.Address, err)
		}
	}
	return s, nil
}

func withDefaults(set Settings) Settings {
	if set.HoldTime == 0 {
		set.HoldTime = DefaultHoldTime
	}
	if set.ConnectRetry == 0 {
		set.ConnectRetry = DefaultConnectRetry
	}
	set.Peers = slices.Clone(set.Peers)
	for i := range set.Peers {
		if set.Peers[i].HoldTime == 0 {
			set.Peers[i].HoldTime = set.HoldTime
		}
		if set.Peers[i].Port == 0 {
			set.Peers[i].Port = DefaultPort
		}
	}
	return set
}

func seconds(d time.Duration) uint64 { return uint64((d + time.Second - 1) / time.Second) }

func (s *Speaker) apiPeer(p Peer) *api.Peer {
	hold := seconds(p.HoldTime)
	keep := max(hold/3, 1)
	fams := []*api.Family{{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}, {Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}}
	afis := make([]*api.AfiSafi, 0, len(fams))
	for _, f := range fams {
		afis = append(afis, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true}})
	}
	return &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.ASN, AuthPassword: p.Password},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      seconds(s.set.ConnectRetry),
			HoldTime:          hold,
			KeepaliveInterval: keep,
			// After ResetPeer (a BFD failure), dial again as soon as
			// after any failed attempt, not after GoBGP's 30s.
			IdleHoldTimeAfterReset: seconds(s.set.ConnectRetry),
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
		AfiSafis:  afis,
	}
}

// SetAnnounced makes the announced host routes those of addrs: new ones
// are announced, missing ones withdrawn. After WithdrawAll it does nothing.
func (s *Speaker) SetAnnounced(ctx context.Context, addrs []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen || s.stopped {
		return nil
	}
	want := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		want[a.Unmap()] = true
	}
	var errs []error
	for a := range s.announced {
		if !want[a] {
			errs = append(errs, s.withdrawLocked(ctx, a))
		}
	}
	for a := range want {
		if _, ok := s.announced[a]; !ok {
			errs = append(errs, s.announceLocked(ctx, a))
		}
	}
	return errors.Join(errs...)
}

func (s *Speaker) announceLocked(ctx context.Context, a netip.Addr) error {
	p, err := s.path(a)
	if err != nil {
		return err
	}
	res, err := s.srv.AddPath(ctx, &api.AddPathRequest{Path: p})
	if err != nil {
		return fmt.Errorf("bgp: announce %v: %w", a, err)
	}
	s.announced[a] = res.Uuid
	s.log.Info("vip announced", zap.Stringer("prefix", hostPrefix(a)))
	return nil
}

func (s *Speaker) withdrawLocked(ctx context.Context, a netip.Addr) error {
	if err := s.srv.DeletePath(ctx, &api.DeletePathRequest{Uuid: s.announced[a]}); err != nil {
		return fmt.Errorf("bgp: withdraw %v: %w", a, err)
	}
	delete(s.announced, a)
	s.log.Info("vip withdrawn", zap.Stringer("prefix", hostPrefix(a)))
	return nil
}

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// path is a's host route with the speaker's attributes.
func (s *Speaker) path(a netip.Addr) (*api.Path, error) {
	nlri, err := anypb.New(&api.IPAddressPrefix{Prefix: a.String(), PrefixLen: uint32(a.BitLen())})
	if err != nil {
		return nil, err
	}
	origin, _ := anypb.New(&api.OriginAttribute{Origin: 0}) // IGP
	attrs := []*anypb.Any{origin}
	fam := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	if a.Is4() {
		nh := "0.0.0.0" // unspecified: GoBGP puts the session's local address
		if s.set.NextHop.Is4() {
			nh = s.set.NextHop.String()
		}
		x, _ := anypb.New(&api.NextHopAttribute{NextHop: nh})
		attrs = append(attrs, x)
	} else {
		fam = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
		nh := "::"
		if s.set.NextHop.Is6() {
			nh = s.set.NextHop.String()
		}
		x, _ := anypb.New(&api.MpReachNLRIAttribute{Family: fam, NextHops: []string{nh}, Nlris: []*anypb.Any{nlri}})
		attrs = append(attrs, x)
	}
	if len(s.set.Communities) > 0 {
		x, _ := anypb.New(&api.CommunitiesAttribute{Communities: s.set.Communities})
		attrs = append(attrs, x)
	}
	return &api.Path{Family: fam, Nlri: nlri, Pattrs: attrs}, nil
}

// Announced returns the announced host routes, sorted.
func (s *Speaker) Announced() []netip.Prefix {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.Prefix, 0, len(s.announced))
	for a := range s.announced {
		out = append(out, hostPrefix(a))
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

// WithdrawAll withdraws every route and announces nothing from then on:
// the first step of a shutdown, before the router has moved the flows.
func (s *Speaker) WithdrawAll(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = true
	if s.stopped {
		return nil
	}
	var errs []error
	for a := range s.announced {
		errs = append(errs, s.withdrawLocked(ctx, a))
	}
	return errors.Join(errs...)
}

// Stop closes every session and the server.
func (s *Speaker) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
		s.log.Warn("bgp stop", zap.Error(err))
	}
	s.srv.Stop()
}

// ResetPeer closes the BGP session with peer (a NOTIFICATION, Cease /
// Administrative Reset, with why as its communication, when the path
// still carries it); GoBGP dials it again after connect_retry.
func (s *Speaker) ResetPeer(ctx context.Context, peer netip.Addr, why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	if err := s.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: peer.String(), Communication: why}); err != nil {
		return fmt.Errorf("bgp: reset %v: %w", peer, err)
	}
	return nil
}

// PeerStates returns every peer's session, in configured order.
func (s *Speaker) PeerStates() []PeerState {
	// Under the lock: a stopped server never answers, so ListPeer must
	// not race with Stop.
	s.mu.Lock()
	defer s.mu.Unlock()
	peers := s.set.Peers
	byAddr := map[string]*api.Peer{}
	if !s.stopped {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
			byAddr[p.Conf.NeighborAddress] = p
		})
	}
	out := make([]PeerState, 0, len(peers))
	for _, p := range peers {
		out = append(out, peerState(p, byAddr[p.Address.String()]))
	}
	return out
}

func peerState(p Peer, ap *api.Peer) PeerState {
	st := PeerState{Address: p.Address, ASN: p.ASN, State: "idle"}
	if ap == nil || ap.State == nil {
		return st
	}
	st.State = sessionName(ap.State.SessionState)
	st.Up = ap.State.SessionState == api.PeerState_ESTABLISHED
	if st.Up && ap.Timers != nil && ap.Timers.State != nil && ap.Timers.State.Uptime != nil {
		st.Since = ap.Timers.State.Uptime.AsTime()
	}
	for _, af := range ap.AfiSafis {
		if af.State != nil {
			st.PrefixesSent += int(af.State.Advertised)
		}
	}
	return st
}

func sessionName(s api.PeerState_SessionState) string {
	switch s {
	case api.PeerState_IDLE:
		return "idle"
	case api.PeerState_CONNECT:
		return "connect"
	case api.PeerState_ACTIVE:
		return "active"
	case api.PeerState_OPENSENT:
		return "opensent"
	case api.PeerState_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_ESTABLISHED:
		return "established"
	}
	return "unknown"
}

// Reconfigure applies new settings: peers added, removed or changed are
// added, deleted or replaced and the other sessions stay up. A change of
// the speaker's own settings returns ErrRestart and changes nothing.
func (s *Speaker) Reconfigure(ctx context.Context, next Settings) error {
	next = withDefaults(next)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.set
	if cur.ASN != next.ASN || cur.RouterID != next.RouterID || cur.NextHop != next.NextHop ||
		cur.ConnectRetry != next.ConnectRetry || !slices.Equal(cur.Communities, next.Communities) {
		return ErrRestart
	}
	old := map[netip.Addr]Peer{}
	for _, p := range cur.Peers {
		old[p.Address] = p
	}
	keep := map[netip.Addr]bool{}
	var errs []error
	for _, p := range next.Peers {
		keep[p.Address] = true
		o, ok := old[p.Address]
		if ok && o == p {
			continue
		}
		if ok {
			errs = append(errs, s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: p.Address.String()}))
		}
		s.set.HoldTime = next.HoldTime // apiPeer reads the speaker's timers
		errs = append(errs, s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(p)}))
		s.log.Info("bgp peer configured", zap.Stringer("peer", p.Address))
	}
	for a := range old {
		if !keep[a] {
			errs = append(errs, s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: a.String()}))
			s.log.Info("bgp peer removed", zap.Stringer("peer", a))
		}
	}
	s.set = next
	return errors.Join(errs...)
}
