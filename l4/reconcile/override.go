// Run-time backend overrides: an operator's drain, disable and enable,
// set through the admin API and kept across reloads that leave the
// backend unchanged.

package reconcile

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// Errors a caller can tell apart (the admin API answers them with 404).
var (
	ErrNoVIP     = errors.New("no such VIP")
	ErrNoBackend = errors.New("no such backend")
	// ErrAmbiguous: an IP alone names more than one backend (400).
	ErrAmbiguous = errors.New("ambiguous backend")
)

// SetOverride sets an operator's state for backend ref (its name, its
// address, or its IP when only one backend of the VIP has it) of the VIP
// named vipName. by says who set it, for status and the log. A drain or
// disable that would leave the VIP no eligible backend, or the rest too
// little room for the live flows that move (capacity.go), is refused
// with ErrRefused unless force; forced, the result says what was
// overridden.
func (r *Runtime) SetOverride(vipName, ref string, o l4.Override, by string, force bool) (plane.OverrideResult, error) {
	v := r.vipNamed(vipName)
	if v == nil {
		return plane.OverrideResult{}, fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	res, err := v.setOverride(ref, o, by, force)
	if err == nil && !res.Unchanged {
		r.stateChanged()
	}
	return res, err
}

// vipNamed returns the running VIP called name, or nil.
func (r *Runtime) vipNamed(name string) *vip {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.vips {
		if v.name() == name {
			return v
		}
	}
	return nil
}

func (v *vip) setOverride(ref string, o l4.Override, by string, force bool) (plane.OverrideResult, error) {
	v.mu.Lock()
	b, err := v.resolveLocked(ref)
	if err != nil {
		v.mu.Unlock()
		return plane.OverrideResult{}, fmt.Errorf("vip %q: %w", v.name(), err)
	}
	prev := b.override.state
	if o == prev {
		res := plane.OverrideResult{VIP: v.name(), Backend: string(b.b.ID), Address: b.b.Addr.String(), Override: o.String(),
			Previous: prev.String(), By: b.override.by, LiveFlows: v.liveOf(b.b), Unchanged: true}
		v.mu.Unlock()
		v.log.Debug("backend override unchanged", zap.String("backend", res.Backend), zap.Stringer("override", o), zap.String("asked_by", by))
		return res, nil
	}
	why := v.refusalLocked(b, o)
	if why != "" && !force {
		v.mu.Unlock()
		v.log.Info("backend override refused", zap.String("backend", string(b.b.ID)), zap.Stringer("override", o),
			zap.String("asked_by", by), zap.String("why", why))
		return plane.OverrideResult{}, fmt.Errorf("%w: %s; --force to %s anyway", ErrRefused, why, o)
	}
	if o == l4.OverrideNone {
		b.override = overrideState{}
	} else {
		b.override = overrideState{state: o, by: by, since: time.Now()}
	}
	b.b.SetEligible(b.keepsPinned())
	err = v.rebuildLocked()
	res := plane.OverrideResult{VIP: v.name(), Backend: string(b.b.ID), Address: b.b.Addr.String(), Override: o.String(),
		Previous: prev.String(), By: by, LiveFlows: v.liveOf(b.b), Forced: why}
	v.mu.Unlock()
	if err != nil {
		return res, fmt.Errorf("vip %q: backend %q: %w", v.name(), b.b.ID, err)
	}
	if o == l4.OverrideDisable {
		res.Reset = v.dp.ResetWhere(func(x *l4.Backend) bool { return x == b.b }, l4.EndDisabled)
	}
	if why != "" {
		v.log.Warn("backend override forced past the capacity guard", zap.String("backend", string(b.b.ID)),
			zap.Stringer("override", o), zap.String("by", by), zap.String("why", why))
	}
	v.log.Info("backend override set", zap.String("backend", string(b.b.ID)), zap.Stringer("override", o),
		zap.Stringer("previous", prev), zap.String("by", by), zap.Int64("live_flows", res.LiveFlows), zap.Int("reset", res.Reset))
	return res, nil
}

// resolveLocked finds the one backend ref names: by identity, by
// address, or by IP alone (v.mu held). A ref that names more than one
// backend, in whichever of these ways, is refused with the candidates:
// acting on the first match is how a drain once reached the wrong machine
// (a backend named with another backend's IP).
func (v *vip) resolveLocked(ref string) (*backend, error) {
	found := v.matchLocked(ref)
	switch len(found) {
	case 1:
		return found[0].b, nil
	case 0:
		ids := make([]string, 0, len(v.backends))
		for id := range v.backends {
			ids = append(ids, string(id))
		}
		slices.Sort(ids)
		return nil, fmt.Errorf("%w %q (backends: %s)", ErrNoBackend, ref, strings.Join(ids, ", "))
	}
	list := make([]string, len(found))
	for i, m := range found {
		list[i] = fmt.Sprintf("%s (%s, by %s)", m.b.b.ID, m.b.b.Addr, m.how)
	}
	return nil, fmt.Errorf("%w: %q names %d backends: %s; name one by its address:port", ErrAmbiguous, ref, len(found), strings.Join(list, ", "))
}

// backendMatch is a backend a ref names, and how it names it.
type backendMatch struct {
	b   *backend
	how string // "name", "address" or "IP"
}

// matchLocked returns every backend ref names, each once, sorted by
// identity (v.mu held).
func (v *vip) matchLocked(ref string) []backendMatch {
	var found []backendMatch
	add := func(b *backend, how string) {
		if !slices.ContainsFunc(found, func(m backendMatch) bool { return m.b == b }) {
			found = append(found, backendMatch{b, how})
		}
	}
	if b, ok := v.backends[l4.BackendID(ref)]; ok {
		how := "name"
		if b.conf.Name == "" {
			how = "address" // an unnamed backend's identity is its address
		}
		add(b, how)
	}
	ap, apErr := netip.ParseAddrPort(ref)
	ip, ipErr := netip.ParseAddr(ref)
	for _, b := range v.backends {
		switch {
		case apErr == nil && b.b.Addr.Addr() == ap.Addr().Unmap() && b.b.Addr.Port() == ap.Port():
			add(b, "address")
		case ipErr == nil && b.b.Addr.Addr() == ip.Unmap():
			add(b, "IP")
		}
	}
	slices.SortFunc(found, func(a, b backendMatch) int { return strings.Compare(string(a.b.b.ID), string(b.b.b.ID)) })
	return found
}
