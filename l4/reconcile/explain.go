// Explain: which backend a client's flow has or would get on a VIP, and
// why (l4lb explain). Read-only: nothing is acquired, refreshed or moved.

package reconcile

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// Explain says which backend client's flow on the VIP called vipName has
// or would get, and why. client's port is 0 when none was given. It
// changes nothing: no flow acquired, no rotation advanced, no pin or
// conntrack entry created or refreshed.
func (r *Runtime) Explain(vipName string, client netip.AddrPort) (plane.Explanation, error) {
	v := r.vipNamed(vipName)
	if v == nil {
		return plane.Explanation{}, fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	if err := reachable(v.key, client.Addr()); err != nil {
		return plane.Explanation{}, err
	}
	e := v.explain(client)
	r.mu.Lock() // v.routes
	v.explainRoutes(v.cfg(), &e)
	r.mu.Unlock()
	return e, nil
}

// reachable refuses a client of the other address family than a VIP on
// a specific (or an IPv4 wildcard) address: no such flow can reach it.
func reachable(k l4.VIPKey, client netip.Addr) error {
	vip := k.Addr.Addr()
	if client.Is4() == vip.Is4() || (vip.Is6() && vip.IsUnspecified()) {
		return nil
	}
	return fmt.Errorf("%w: %s cannot reach VIP %s (another address family)", plane.ErrBadClient, client, k.Addr)
}

// explain composes the answer: the VIP, its candidates, then what its
// data plane holds and chooses.
func (v *vip) explain(client netip.AddrPort) plane.Explanation {
	vc := v.cfg()
	f := l4.Flow{Src: client, Dst: v.key.Addr, Proto: v.key.Proto}
	e := plane.Explanation{
		VIP: vc.Name, Listen: v.key.Addr.String(), Protocol: v.key.Proto.String(), Mode: vc.Mode.String(),
		Algorithm: vc.Algorithm.String(), Client: client.Addr().String(), Flow: plane.FlowString(f),
	}
	if client.Port() != 0 {
		e.Client = client.String()
	} else {
		e.Flow = f.Proto.String() + " " + strings.TrimSuffix(f.Src.String(), ":0") + ":*->" + f.Dst.String() // any port
	}
	if vc.Algorithm.Hashing() && vc.Mode == l4.ModeProxy {
		e.HashKey = vc.HashKey.String()
	}
	q := &plane.Query{Flow: f, Port: client.Port() != 0, Algorithm: vc.Algorithm, Snap: v.store.Load(), Answer: &e}
	v.candidates(q, vc)
	if v.key.Addr.Addr().IsUnspecified() {
		e.Notes = append(e.Notes, fmt.Sprintf("the VIP listens on the wildcard address %s: UDP session keys and a 5tuple hash hold the address the client sent to, which is not known here; %s stands in for it", v.key.Addr.Addr(), v.key.Addr.Addr()))
	}
	v.dp.Explain(q)
	if e.Because == "" {
		e.Because = "no backend: none is eligible"
	}
	return e
}

// candidates lists every backend of the VIP with its state and why it
// takes no new flows when it does not.
func (v *vip) candidates(q *plane.Query, vc *config.VIP) {
	effective := map[*l4.Backend]uint32{}
	if q.Snap != nil {
		for _, m := range q.Snap.Members {
			effective[m.Backend] = m.Weight
		}
	}
	v.mu.Lock()
	all := make([]*backend, 0, len(v.backends)+len(v.retired))
	for _, b := range v.backends {
		all = append(all, b)
	}
	retired := len(all)
	for _, b := range v.retired {
		if b.b.LiveFlows() > 0 { // as status lists them
			all = append(all, b)
		}
	}
	for i, b := range all {
		w, in := effective[b.b]
		c := plane.NewCandidate(b.b)
		c.Weight, c.EffectiveWeight, c.Health, c.Candidate = b.weight, w, b.health.String(), in
		if b.override.state != l4.OverrideNone {
			c.Override = b.override.state.String()
		}
		if scalesWeights(vc) && in {
			c.EffectiveWeight, c.Scale = (w+50)/100, max(b.scale, 0) // hundredths (effectiveMembers)
			if c.Scale == 0 {
				c.Scale = 1
			}
		}
		c.ReplicaLag = lagStatus(b.lag)
		c.Why = whyNot(b, in, i >= retired)
		if c.Why == "eligible, but not in the snapshot yet" && b.conf.Backup {
			c.Why = "backup: standing by while a primary (or, with backup_mode first, an earlier backup) serves"
		}
		q.Answer.Candidates = append(q.Answer.Candidates, c)
	}
	v.mu.Unlock()
	slices.SortFunc(q.Answer.Candidates, func(a, b plane.Candidate) int { return cmp.Compare(a.ID, b.ID) })
}

// whyNot says why b takes no new flows, and what becomes of the flows
// pinned to it; "" when it is a candidate.
func whyNot(b *backend, candidate, removed bool) string {
	switch {
	case removed:
		return "removed by a reload: no new flows; listed while its flows last"
	case b.override.state == l4.OverrideDisable:
		return "disabled by " + b.override.by + ": no new flows, pinned flows move"
	case b.override.state == l4.OverrideDrain && b.keepsPinned():
		return "drained by " + b.override.by + ": no new flows; established flows and pins stay"
	case b.override.state == l4.OverrideDrain:
		return "drained by " + b.override.by + " and " + whyIneligible(b)
	case !b.eligible():
		return whyIneligible(b)
	case !candidate:
		return "eligible, but not in the snapshot yet"
	}
	return ""
}

func whyIneligible(b *backend) string {
	if b.health == l4.HealthDown {
		return "down: no new flows; pinned flows move on their next packet"
	}
	return "weight 0: no new flows; pinned flows move on their next packet"
}
