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
)

// Errors a caller can tell apart (the admin API answers them with 404).
var (
	ErrNoVIP     = errors.New("no such VIP")
	ErrNoBackend = errors.New("no such backend")
	// ErrAmbiguous: an IP alone names more than one backend (400).
	ErrAmbiguous = errors.New("ambiguous backend")
)

// OverrideResult says what setting an override did.
type OverrideResult struct {
	VIP      string `json:"vip"`
	Backend  string `json:"backend"` // the backend's identity: its name, or its address
	Address  string `json:"address"`
	Override string `json:"override"`
	Previous string `json:"previous"`
	By       string `json:"by"`
	// LiveFlows counts the backend's established flows when the override
	// was set: a drain lets them finish.
	LiveFlows int64 `json:"live_flows"`
	// Reset counts the flows a disable ended (TCP connections, xdp
	// conntrack entries); UDP sessions move on their next datagram.
	Reset int `json:"reset"`
	// Unchanged: the backend was already so (an enable of a backend with
	// no override, a drain of a drained one); nothing was set or logged,
	// and By is who set the override in force.
	Unchanged bool `json:"unchanged,omitempty"`
}

// SetOverride sets an operator's state for backend ref (its name, its
// address, or its IP when only one backend of the VIP has it) of the VIP
// named vipName. by says who set it, for status and the log.
func (r *Runtime) SetOverride(vipName, ref string, o l4.Override, by string) (OverrideResult, error) {
	v := r.vipNamed(vipName)
	if v == nil {
		return OverrideResult{}, fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	return v.setOverride(ref, o, by)
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

func (v *vip) setOverride(ref string, o l4.Override, by string) (OverrideResult, error) {
	v.mu.Lock()
	b, err := v.resolveLocked(ref)
	if err != nil {
		v.mu.Unlock()
		return OverrideResult{}, fmt.Errorf("vip %q: %w", v.name(), err)
	}
	prev := b.override.state
	if o == prev {
		res := OverrideResult{VIP: v.name(), Backend: string(b.b.ID), Address: b.b.Addr.String(), Override: o.String(),
			Previous: prev.String(), By: b.override.by, LiveFlows: b.b.LiveFlows(), Unchanged: true}
		v.mu.Unlock()
		v.log.Debug("backend override unchanged", zap.String("backend", res.Backend), zap.Stringer("override", o), zap.String("asked_by", by))
		return res, nil
	}
	if o == l4.OverrideNone {
		b.override = overrideState{}
	} else {
		b.override = overrideState{state: o, by: by, since: time.Now()}
	}
	b.b.SetEligible(b.keepsPinned())
	err = v.rebuildLocked()
	res := OverrideResult{VIP: v.name(), Backend: string(b.b.ID), Address: b.b.Addr.String(), Override: o.String(),
		Previous: prev.String(), By: by, LiveFlows: b.b.LiveFlows()}
	v.mu.Unlock()
	if err != nil {
		return res, fmt.Errorf("vip %q: backend %q: %w", v.name(), b.b.ID, err)
	}
	if o == l4.OverrideDisable {
		res.Reset = v.dp.resetWhere(func(x *l4.Backend) bool { return x == b.b }, l4.EndDisabled)
	}
	v.log.Info("backend override set", zap.String("backend", string(b.b.ID)), zap.Stringer("override", o),
		zap.Stringer("previous", prev), zap.String("by", by), zap.Int64("live_flows", res.LiveFlows), zap.Int("reset", res.Reset))
	return res, nil
}

// resolveLocked finds a backend by identity, address, or IP alone when
// only one backend has it (v.mu held).
func (v *vip) resolveLocked(ref string) (*backend, error) {
	if b, ok := v.backends[l4.BackendID(ref)]; ok {
		return b, nil
	}
	if ap, err := netip.ParseAddrPort(ref); err == nil {
		for _, b := range v.backends {
			if b.b.Addr == ap {
				return b, nil
			}
		}
	}
	if ip, err := netip.ParseAddr(ref); err == nil {
		var found []*backend
		for _, b := range v.backends {
			if b.b.Addr.Addr() == ip.Unmap() || b.b.Addr.Addr() == ip {
				found = append(found, b)
			}
		}
		switch len(found) {
		case 1:
			return found[0], nil
		case 0:
		default:
			return nil, fmt.Errorf("%w: %s is the address of %d backends, name one by address:port or name", ErrAmbiguous, ref, len(found))
		}
	}
	ids := make([]string, 0, len(v.backends))
	for id := range v.backends {
		ids = append(ids, string(id))
	}
	slices.Sort(ids)
	return nil, fmt.Errorf("%w %q (backends: %s)", ErrNoBackend, ref, strings.Join(ids, ", "))
}
