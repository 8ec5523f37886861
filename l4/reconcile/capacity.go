// The capacity guard: whether taking backends out of a VIP's new flows
// (an operator's drain or disable, a reload that removes them) leaves
// the VIP a backend at all, and leaves the rest room for the live flows
// that will come to them.

package reconcile

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// ErrRefused: the guard refused a drain or disable (the admin API
// answers 409); force sets it anyway.
var ErrRefused = errors.New("refused")

// capRow is a backend that would take flows moved off another: its
// identity, its cap (max_conns or max_sessions; 0: none), its peak and
// its live flows.
type capRow struct {
	id                string
	limit, peak, live int64
}

// flowUnits name a VIP's flows and their cap in the guard's messages.
type flowUnits struct{ flow, limit string }

func unitsOf(vc *config.VIP) flowUnits {
	switch {
	case vc.Mode == l4.ModeXDP:
		return flowUnits{"flow", ""}
	case vc.Protocol == l4.UDP:
		return flowUnits{"session", "max_sessions"}
	}
	return flowUnits{"connection", "max_conns"}
}

// shortfall says how rows cannot take moving more live flows ("leaves
// db1 (max_conns 100, 80 live) to take 60 live connections: 40 of
// room"), or "" when they can. Their capacity is the sum of their caps
// when every one has a cap, else of their peaks: the most each was seen
// to hold.
func shortfall(rows []capRow, moving int64, u flowUnits) string {
	if moving <= 0 || len(rows) == 0 {
		return ""
	}
	capped := true
	for _, r := range rows {
		capped = capped && r.limit > 0
	}
	room := int64(0)
	shown := make([]string, 0, len(rows))
	for _, r := range rows {
		c, what := r.peak, "peak"
		if capped {
			c, what = r.limit, u.limit
		}
		room += max(c-r.live, 0)
		shown = append(shown, fmt.Sprintf("%s (%s %d, %d live)", r.id, what, c, r.live))
	}
	if room >= moving {
		return ""
	}
	return fmt.Sprintf("leaves %s to take %s: %d of room", listSome(shown, 4), config.Plural(int(moving), "live "+u.flow), room)
}

// listSome joins the first n items and counts the rest.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// vipNoun names a VIP in a message, saying when it is a read pool (its
// checks want role replica).
func vipNoun(vc *config.VIP) string {
	if vc.Health.Role == l4.RoleReplica {
		return fmt.Sprintf("VIP %s (a read pool: role replica)", vc.Name)
	}
	return "VIP " + vc.Name
}

// refusalLocked says why setting o (drain or disable) on b would leave
// the VIP no eligible backend, or the backends left too little room for
// the live flows that move to them, or "" (v.mu held). A drain moves the
// flows of an eligible backend only as they reconnect, a disable at
// once; either way the rest must take them.
func (v *vip) refusalLocked(b *backend, o l4.Override) string {
	if o == l4.OverrideNone {
		return ""
	}
	vc := v.cfg()
	if !vc.CapacityGuard {
		return ""
	}
	rest := maps.Clone(v.backends)
	delete(rest, b.b.ID)
	serving, _ := servingSet(rest, vc, nil)
	if b.eligible() && len(serving) == 0 {
		return fmt.Sprintf("%s %s leaves %s with no eligible backend", o, b.b.ID, vipNoun(vc))
	}
	moving := int64(0)
	if b.eligible() || o == l4.OverrideDisable {
		moving = v.liveOf(b.b)
	}
	rows := make([]capRow, len(serving))
	for i, s := range serving {
		rows[i] = capRow{id: string(s.b.ID), limit: s.b.MaxFlows(), peak: s.b.PeakFlows(), live: v.liveOf(s.b)}
	}
	if why := shortfall(rows, moving, unitsOf(vc)); why != "" {
		return fmt.Sprintf("%s %s %s", o, b.b.ID, why)
	}
	return ""
}

// liveOf returns b's live flows as the VIP's plane counts them.
func (v *vip) liveOf(b *l4.Backend) int64 {
	if c, ok := v.dp.(plane.LiveCounter); ok {
		return c.LiveFlows(b)
	}
	return b.LiveFlows()
}

// ReloadCapacity warns, for each VIP running in st that next keeps, when
// a reload to next would leave it no eligible backend while it has one
// now, or when the backends it removes or sets to weight 0 hold more
// live flows than the backends left have room for (as the drain guard
// counts). Health and overrides are taken as they are now; a backend the
// reload adds counts as eligible, with its cap and no peak. VIPs with
// DNS-named backends are left out: what their names expand to is not
// known here.
func ReloadCapacity(st *plane.Status, next *config.Config) []config.Problem {
	var out []config.Problem
	for i := range next.VIPs {
		vc := &next.VIPs[i]
		vs := runningVIP(st, vc.Name)
		if vs == nil || !vc.CapacityGuard || slices.ContainsFunc(vc.Backends, config.Backend.IsNamed) {
			continue
		}
		if msg := reloadShortfall(vs, vc); msg != "" {
			out = append(out, config.Problem{File: next.Path, Line: vc.Line, VIP: vc.Name, Msg: msg})
		}
	}
	return out
}

func runningVIP(st *plane.Status, name string) *plane.VIPStatus {
	for i := range st.VIPs {
		if st.VIPs[i].Name == name && !st.VIPs[i].Draining {
			return &st.VIPs[i]
		}
	}
	return nil
}

// reloadShortfall is ReloadCapacity for one VIP: its backends after the
// reload (vc), with health, overrides and counts from vs.
func reloadShortfall(vs *plane.VIPStatus, vc *config.VIP) string {
	now := map[string]*plane.BackendStatus{}
	for i := range vs.Backends {
		if !vs.Backends[i].Removed {
			now[vs.Backends[i].ID] = &vs.Backends[i]
		}
	}
	next := map[l4.BackendID]*backend{}
	kept := map[string]bool{}
	for _, bc := range vc.Backends {
		nb := &backend{weight: uint32(bc.Weight), conf: bc}
		if rs := now[bc.ID()]; rs != nil && rs.Address == bc.Address.String() {
			kept[rs.ID] = bc.Weight > 0 || rs.Weight == 0 // weight 0 already: nothing moves
			if rs.Health == l4.HealthDown.String() {
				nb.health = l4.HealthDown
			}
			if rs.Override != "" {
				nb.override.state = l4.OverrideDrain // either override keeps new flows off
			}
		}
		next[l4.BackendID(bc.ID())] = nb
	}
	serving, _ := servingSet(next, vc, nil)
	if len(serving) == 0 && vs.Eligible > 0 {
		return fmt.Sprintf("the reload leaves %s with no eligible backend", vipNoun(vc))
	}
	moving, gone := int64(0), []string(nil)
	for _, rs := range vs.Backends {
		if keeps, ok := kept[rs.ID]; !rs.Removed && !keeps && rs.LiveFlows > 0 {
			moving += rs.LiveFlows
			what := "removes"
			if ok {
				what = "sets weight 0 on"
			}
			gone = append(gone, fmt.Sprintf("%s %s (%d live)", what, rs.ID, rs.LiveFlows))
		}
	}
	rows := make([]capRow, len(serving))
	for i, s := range serving {
		rows[i] = capRow{id: string(s.conf.ID()), limit: backendCap(vc, &s.conf)}
		if rs := now[rows[i].id]; rs != nil {
			rows[i].peak, rows[i].live = rs.PeakFlows, rs.LiveFlows
		}
	}
	if why := shortfall(rows, moving, unitsOf(vc)); why != "" {
		return fmt.Sprintf("the reload %s: %s", listSome(gone, 4), why)
	}
	return ""
}
