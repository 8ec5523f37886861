// The announcer: one loop that keeps the speaker's routes equal to what
// the runtime serves, and the speaker's life across reloads and shutdown.

package announce

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/bfd"
	"github.com/l4lb/l4lb/internal/bgp"
	"github.com/l4lb/l4lb/l4/plane"
)

// Served is what the announcer reads of the runtime (a *reconcile.Runtime).
type Served interface {
	// Serving lists the VIP addresses with an eligible backend.
	Serving() []netip.Addr
	// ServingChanged is signalled when that list may have changed.
	ServingChanged() <-chan struct{}
}

// retryAnnounce is how often the announcer recomputes without a poke: a
// failed announcement is tried again.
const retryAnnounce = 5 * time.Second

// Announcer keeps the speaker's routes equal to the runtime's served
// addresses. It exists from start to exit; its speaker only while the
// config has [bgp]. Its methods are nil-safe.
type Announcer struct {
	log  *zap.Logger
	rt   Served
	stop chan struct{}
	done chan struct{}

	mu        sync.Mutex
	conf      *config.BGP
	sp        *bgp.Speaker // nil: no [bgp]
	withdrawn bool         // the shutdown withdrew everything
	bfd       *bfd.Server  // nil: no peer has BFD
	bgpResets map[netip.Addr]uint64
}

// Start starts the announcer (and the speaker, when conf is not nil).
func Start(log *zap.Logger, rt Served, conf *config.BGP) (*Announcer, error) {
	a := &Announcer{log: log, rt: rt, stop: make(chan struct{}), done: make(chan struct{}), bgpResets: map[netip.Addr]uint64{}}
	if err := a.Reconfigure(conf); err != nil {
		return nil, err
	}
	go a.run()
	return a, nil
}

func settings(c *config.BGP) bgp.Settings {
	s := bgp.Settings{ASN: c.ASN, RouterID: c.RouterID, NextHop: c.NextHop, Communities: c.Communities,
		HoldTime: c.HoldTime, ConnectRetry: c.ConnectRetry}
	for _, p := range c.Peers {
		s.Peers = append(s.Peers, bgp.Peer{Address: p.Address, ASN: p.ASN, Password: p.Password, HoldTime: p.HoldTime, Port: p.Port})
	}
	return s
}

// Reconfigure applies a (re)loaded [bgp]: unchanged peers keep their
// sessions and every VIP stays announced; a changed ASN, router id, next
// hop or community list restarts the speaker (its sessions flap). BFD
// sessions follow the peers' bfd tables; an unchanged one stays up.
func (a *Announcer) Reconfigure(conf *config.BGP) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.reconfigureLocked(conf)
	return errors.Join(err, a.setBFDLocked(a.conf))
}

func (a *Announcer) reconfigureLocked(conf *config.BGP) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case conf == nil && a.sp == nil:
	case conf == nil:
		a.log.Info("[bgp] removed: closing the sessions")
		a.sp.Stop()
		a.sp = nil
	case a.sp != nil:
		err := a.sp.Reconfigure(ctx, settings(conf))
		if !errors.Is(err, bgp.ErrRestart) {
			a.conf = conf
			return err
		}
		a.log.Info("bgp speaker settings changed: restarting the speaker")
		a.sp.Stop()
		a.sp = nil
		fallthrough
	default:
		sp, err := bgp.Start(ctx, a.log, settings(conf))
		if err != nil {
			return err
		}
		a.sp = sp
		a.log.Info("bgp speaker started", zap.Uint32("asn", conf.ASN), zap.Stringer("router_id", conf.RouterID), zap.Int("peers", len(conf.Peers)))
		a.syncLocked(ctx)
	}
	a.conf = conf
	return nil
}

func (a *Announcer) run() {
	defer close(a.done)
	tick := time.NewTicker(retryAnnounce)
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-a.rt.ServingChanged():
		case <-tick.C:
		}
		a.mu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a.syncLocked(ctx)
		cancel()
		a.mu.Unlock()
	}
}

// syncLocked announces what the runtime serves (a.mu held).
func (a *Announcer) syncLocked(ctx context.Context) {
	if a.sp == nil || a.withdrawn {
		return
	}
	if err := a.sp.SetAnnounced(ctx, a.rt.Serving()); err != nil {
		a.log.Warn("bgp announcement failed; retrying", zap.Error(err))
	}
}

// Withdraw is the first step of a shutdown: every route goes, then the
// router has grace to move the flows elsewhere before the drain starts.
func (a *Announcer) Withdraw() {
	if a == nil {
		return
	}
	a.mu.Lock()
	sp, conf := a.sp, a.conf
	a.withdrawn = true
	a.mu.Unlock()
	if sp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sp.WithdrawAll(ctx); err != nil {
		a.log.Warn("bgp withdraw failed", zap.Error(err))
	}
	a.log.Info("bgp routes withdrawn; waiting for the routers before draining", zap.Duration("shutdown_grace", conf.ShutdownGrace))
	time.Sleep(conf.ShutdownGrace)
}

// Close stops the loop and the speaker: the sessions close.
func (a *Announcer) Close() {
	if a == nil {
		return
	}
	close(a.stop)
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bfd != nil { // AdminDown first: the router takes it for no failure
		a.bfd.Close()
		a.bfd = nil
	}
	if a.sp != nil {
		a.sp.Stop()
		a.sp = nil
	}
}

// Status is the speaker's state for l4lb status; nil without [bgp].
func (a *Announcer) Status() *plane.BGPStatus {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	sp, conf, withdrawn, bs := a.sp, a.conf, a.withdrawn, a.bfd
	resets := make(map[netip.Addr]uint64, len(a.bgpResets))
	for k, v := range a.bgpResets {
		resets[k] = v
	}
	a.mu.Unlock()
	if sp == nil || conf == nil {
		return nil
	}
	st := &plane.BGPStatus{ASN: conf.ASN, RouterID: conf.RouterID.String(), Withdrawn: withdrawn, Announced: []string{}}
	for _, p := range sp.Announced() {
		st.Announced = append(st.Announced, p.String())
	}
	now := time.Now()
	for _, p := range sp.PeerStates() {
		ps := plane.BGPPeerStatus{Address: p.Address.String(), ASN: p.ASN, State: p.State, Up: p.Up, Since: p.Since, PrefixesSent: p.PrefixesSent}
		if p.Up && !p.Since.IsZero() {
			ps.UptimeSeconds = now.Sub(p.Since).Seconds()
		}
		st.Peers = append(st.Peers, ps)
	}
	bfdStatus(bs, resets, st)
	return st
}
