// Agent checks (HAProxy agent-check): what a backend's agent asks for,
// applied to its eligibility, weight and cap.

package reconcile

import (
	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/health"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// agentDrains reports whether b's agent lets its established and pinned
// flows stay while new ones go elsewhere: it said drain, or a weight of
// 0% (HAProxy treats both as a soft stop).
func (b *backend) agentDrains() bool {
	return b.agent.Admin == health.AgentDrain || b.agent.WeightSet && b.agent.Weight == 0
}

// flowCap is b's cap on live flows in vc: the agent's maxconn when it
// said one (0: none), else the file's. Only proxy VIPs count flows.
func (b *backend) flowCap(vc *config.VIP) int64 {
	if b.agent.MaxConnSet && vc.Mode == l4.ModeProxy {
		return int64(b.agent.MaxConn)
	}
	return backendCap(vc, &b.conf)
}

// sameAgent reports whether a reload from running to next keeps the
// backends' agent (the same agent_port): what it said stays in force.
// Otherwise it is dropped: no agent, or another one that has not spoken.
func sameAgent(running, next *config.VIP) bool {
	return running != nil && running.Health.AgentPort != 0 && running.Health.AgentPort == next.Health.AgentPort
}

// setAgent records what b's agent asks for now and, when that moves new
// flows, publishes a snapshot; an agent that says down takes the
// backend out as a failed check does (pinned flows move, on_down).
func (v *vip) setAgent(id l4.BackendID, st health.AgentState, changed bool) {
	v.mu.Lock()
	b, ok := v.backends[id]
	if !ok || v.cfg().Health.AgentPort == 0 {
		// A reload just took the agent away: a reply in flight before its
		// loop stopped must not bring back a state nothing will lift.
		v.mu.Unlock()
		return
	}
	old := b.agent
	b.agent = st
	if !changed {
		v.mu.Unlock()
		if st.Error != "" && st.Error != old.Error {
			v.log.Info("agent check gave no usable reply; its state stays", zap.String("backend", string(id)),
				zap.String("error", st.Error), zap.String("state", st.String()))
		}
		return
	}
	down := st.Down && !old.Down && b.health != l4.HealthDown // the check had not taken it out already
	b.b.SetEligible(b.keepsPinned())
	b.b.SetMaxFlows(b.flowCap(v.cfg()))
	_ = v.rebuildLocked() // logged there
	vc := v.cfg()
	v.mu.Unlock()

	v.log.Info("agent changed the backend", zap.String("backend", string(id)), zap.String("from", old.String()),
		zap.String("to", st.String()), zap.String("reply", st.Reply), zap.String("why", st.Why))
	if down {
		v.wentDown(b, vc)
	}
}

// wentDown does what a backend that went down asks: its pinned flows
// move (the data plane purges them) and on_down applies to its
// established ones.
func (v *vip) wentDown(b *backend, vc *config.VIP) {
	go v.dp.BackendDown(b.b) // a purge walks the flow table: not on the probe goroutine
	switch vc.Health.OnDown {
	case l4.OnDownReset:
		go func() {
			n := v.dp.ResetWhere(func(x *l4.Backend) bool { return x == b.b }, l4.EndOnDown)
			v.log.Info("on_down reset: sessions closed", zap.String("backend", string(b.b.ID)), zap.Int("reset", n))
		}()
	case l4.OnDownGraceful:
		go v.closeGracefully(b.b)
	}
}

// agentStatus is b's agent as status shows it; nil without an agent.
func agentStatus(on bool, st health.AgentState) *plane.AgentStatus {
	if !on {
		return nil
	}
	return &plane.AgentStatus{State: st.String(), Why: st.Why, Reply: st.Reply, Error: st.Error}
}
