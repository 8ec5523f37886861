// Status: what runs, for the admin API and `l4lb status`.

package reconcile

import (
	"cmp"
	"slices"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// Status reports every VIP, in the config file's order, and its backends.
func (r *Runtime) Status() plane.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	var st plane.Status
	if r.cfg != nil {
		st.Config = r.cfg.Path
	}
	st.Stopping = r.closed
	r.proxy.FillStatus(&st)
	if r.xdp != nil {
		st.XDP = r.xdp.Status()
	}
	now := time.Now()
	for _, v := range r.vips {
		vs := v.status()
		if r.cfg != nil && r.names != nil {
			if tv := r.cfg.VIP(vs.Name); tv != nil {
				vs.Names = r.names.Status(tv, now)
			}
		}
		for i := range vs.Backends {
			if !vs.Backends[i].Removed {
				r.healthStatus(v, &vs.Backends[i])
			}
		}
		r.sniStatus(v, &vs)
		r.changeStatus(&vs)
		st.VIPs = append(st.VIPs, vs)
	}
	for v := range r.drainingVIPs {
		vs := v.status()
		vs.Draining = true
		if m := r.modeChanges[v.key]; m != nil && m.old == v {
			vs.ModeChange = m.status()
		}
		st.VIPs = append(st.VIPs, vs)
	}
	sortVIPs(st.VIPs, r.cfg)
	st.BackendChanges = r.BackendChanges()
	return st
}

// sortVIPs puts VIPs in the order of the config file, as an operator
// wrote them; draining VIPs (gone from the file) come last, by name.
func sortVIPs(vips []plane.VIPStatus, cfg *config.Config) {
	pos := map[string]int{}
	if cfg != nil {
		for i := range cfg.VIPs {
			pos[cfg.VIPs[i].Name] = i
		}
	}
	at := func(v plane.VIPStatus) int {
		if i, ok := pos[v.Name]; ok && !v.Draining {
			return i
		}
		return len(pos)
	}
	slices.SortFunc(vips, func(a, b plane.VIPStatus) int {
		return cmp.Or(cmp.Compare(at(a), at(b)), cmp.Compare(a.Name, b.Name), cmp.Compare(boolInt(a.Draining), boolInt(b.Draining)))
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (v *vip) status() plane.VIPStatus {
	vc := v.cfg()
	s := plane.VIPStatus{
		Name: vc.Name, Listen: v.key.Addr.String(), Protocol: v.key.Proto.String(),
		Algorithm: vc.Algorithm.String(), Eligible: v.store.Load().Len(),
	}
	effective := map[*l4.Backend]uint32{}
	if snap := v.store.Load(); snap != nil {
		for _, m := range snap.Members {
			w := m.Weight
			if scalesWeights(vc) {
				w = (w + 50) / 100 // weights in hundredths there (effectiveMembers)
			}
			effective[m.Backend] = w
		}
	}
	v.mu.Lock()
	for _, b := range v.backends {
		bs := b.status()
		bs.EffectiveWeight = effective[b.b]
		bs.Backup = b.conf.Backup
		bs.Agent = agentStatus(vc.Health.AgentPort != 0, b.agent)
		s.Backends = append(s.Backends, bs)
		if b.conf.Backup || vc.BackupMode == l4.BackupSticky || v.serving == servingPanic {
			s.Serving = v.serving
		}
	}
	s.Backends = append(s.Backends, v.retiredStatusLocked()...)
	rb := v.rebal
	var rows []balanceRow
	if rb != nil {
		rows = v.balanceRowsLocked()
	}
	v.mu.Unlock()
	if rb != nil {
		st := rb.statusWith(rows)
		s.Rebalance = &st
	}
	s.Failover = v.failoverStatus()
	slices.SortFunc(s.Backends, func(a, b plane.BackendStatus) int { return cmp.Compare(a.ID, b.ID) })
	v.dp.FillStatus(&s)
	v.guard.FillStatus(&s)
	peakAtLeastLive(s.Backends)
	return s
}

// peakAtLeastLive raises each backend's peak to the live flows shown
// beside it. The two are read apart: the peak with the backend's row,
// the live count after it (an xdp plane's from its conntrack read, which
// notes the peak only after counting; a proxy pick notes it after
// raising the count), so a flow that opened in between would show more
// live flows than the peak, which is never true.
func peakAtLeastLive(bs []plane.BackendStatus) {
	for i := range bs {
		bs[i].PeakFlows = max(bs[i].PeakFlows, bs[i].LiveFlows)
	}
}

// retiredStatusLocked lists removed backends that still hold flows, and
// forgets those whose last flow ended (v.mu held).
func (v *vip) retiredStatusLocked() []plane.BackendStatus {
	var out []plane.BackendStatus
	keep := v.retired[:0]
	for _, b := range v.retired {
		if b.b.LiveFlows() == 0 {
			continue
		}
		keep = append(keep, b)
		bs := b.status()
		bs.Health, bs.Removed = "removed", true
		out = append(out, bs)
	}
	clear(v.retired[len(keep):])
	v.retired = keep
	return out
}

func (b *backend) status() plane.BackendStatus {
	rtt, _ := b.b.RTT().Value()
	bs := plane.BackendStatus{
		ID: string(b.b.ID), Address: b.b.Addr.String(), Index: b.b.Index, Weight: b.weight,
		Health: b.health.String(), LiveFlows: b.b.LiveFlows(), MaxFlows: b.b.MaxFlows(), PeakFlows: b.b.PeakFlows(),
		MaxConnRate: b.b.MaxConnRate(), OverRate: b.b.OverRate(),
		Flows: b.b.Stats.Flows.Load(), ConnectFails: b.b.Stats.ConnectFails.Load(), Unanswered: b.b.Stats.Unanswered.Load(),
		BytesIn: b.b.Stats.BytesIn.Load(), BytesOut: b.b.Stats.BytesOut.Load(), RTT: rtt,
		Underflows: b.b.Underflows(), ReplicaLag: lagStatus(b.lag),
	}
	if b.override.state != l4.OverrideNone {
		bs.Override, bs.OverrideBy, bs.OverrideSince = b.override.state.String(), b.override.by, b.override.since
	}
	b.stallStatus(&bs)
	if b.ejectKept {
		bs.EjectKept = true
	}
	return bs
}
