// BFD beside the BGP sessions: one session per peer with a bfd table, and
// the BGP session reset when its BFD session fails.

package announce

import (
	"context"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/bfd"
	"github.com/l4lb/l4lb/l4/plane"
)

// bfdSessions are the BFD sessions conf asks for.
func bfdSessions(conf *config.BGP) []bfd.SessionConfig {
	if conf == nil {
		return nil
	}
	var out []bfd.SessionConfig
	for _, p := range conf.Peers {
		if p.BFD != nil {
			out = append(out, bfd.SessionConfig{Peer: p.Address, Interval: p.BFD.Interval, Multiplier: uint8(p.BFD.Multiplier)})
		}
	}
	return out
}

// setBFDLocked makes the BFD sessions those of conf (a.mu held): the
// server starts with the first and stops with the last.
func (a *Announcer) setBFDLocked(conf *config.BGP) error {
	want := bfdSessions(conf)
	if len(want) == 0 {
		if a.bfd != nil {
			a.bfd.Close()
			a.bfd = nil
		}
		return nil
	}
	if a.bfd == nil {
		a.bfd = bfd.NewServer(bfd.Options{Log: a.log.Named("bfd"), OnChange: a.bfdChanged})
	}
	return a.bfd.Set(want)
}

// bfdChanged is every state change of a BFD session (called from the
// session's goroutine: it never waits for the announcer's lock there).
// A failure, Up to Down without the router's AdminDown, resets the BGP
// session: the router, with BFD on, has dropped the routes already or
// does so now, and l4lb's side of the session no longer claims to be up.
func (a *Announcer) bfdChanged(c bfd.Change) {
	fields := []zap.Field{zap.Stringer("peer", c.Peer), zap.Stringer("from", c.From), zap.Stringer("to", c.To)}
	if c.To == bfd.StateDown {
		fields = append(fields, zap.Stringer("diag", c.Diag), zap.Stringer("remote_state", c.RemoteState))
	}
	if !c.Failure() {
		a.log.Info("bfd session state", fields...)
		return
	}
	a.log.Warn("bfd session failed: resetting the bgp session", fields...)
	go a.resetBGP(c.Peer)
}

func (a *Announcer) resetBGP(peer netip.Addr) {
	a.mu.Lock()
	sp := a.sp
	if sp != nil {
		a.bgpResets[peer]++
	}
	a.mu.Unlock()
	if sp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sp.ResetPeer(ctx, peer, "BFD session down"); err != nil {
		a.log.Warn("bgp reset after bfd failure", zap.Stringer("peer", peer), zap.Error(err))
	}
}

// bfdStatus fills the BFD parts of st (a.mu not held).
func bfdStatus(srv *bfd.Server, resets map[netip.Addr]uint64, st *plane.BGPStatus) {
	if srv == nil {
		return
	}
	d := srv.Drops()
	st.BFDDropped = &plane.BFDDrops{Malformed: d.Malformed, TTL: d.TTL, NoSession: d.NoSession}
	for i := range st.Peers {
		p := &st.Peers[i]
		addr, err := netip.ParseAddr(p.Address)
		if err != nil {
			continue
		}
		s, ok := srv.Session(addr)
		if !ok {
			continue
		}
		p.BFD = &plane.BFDStatus{State: s.State.String(), RemoteState: s.RemoteState.String(), Diag: s.Diag.String(),
			Interval: s.Config.Interval, Multiplier: int(s.Config.Multiplier), TxInterval: s.TxInterval, DetectTime: s.DetectTime,
			LocalDiscr: s.LocalDiscr, RemoteDiscr: s.RemoteDiscr, Since: s.Since,
			Sent: s.Sent, Received: s.Received, Dropped: s.Dropped, SendErrors: s.SendErrors,
			Ups: s.Ups, Downs: s.Downs, BGPResets: resets[addr], MaxTxGap: s.MaxTxGap}
	}
}
