// Diff of a kept VIP's backends, paired by identity as the runtime pairs them.

package config

import (
	"net/netip"
	"strconv"

	"github.com/l4lb/l4lb/l4"
)

// backendChanges lists the backends of v that differ from those of the
// running VIP o. A backend that leaves under one identity and comes back
// on the same address under another (a name given, changed or dropped) is
// reported once, as renamed.
func backendChanges(o, v *VIP) []BackendChange {
	old := make(map[string]*Backend, len(o.Backends))
	for i := range o.Backends {
		old[o.Backends[i].ID()] = &o.Backends[i]
	}
	ids := make(map[string]bool, len(v.Backends))
	for _, b := range v.Backends {
		ids[b.ID()] = true
	}
	renamed := map[netip.AddrPort]*Backend{} // old backends whose identity goes, by address
	for i := range o.Backends {
		if b := &o.Backends[i]; !ids[b.ID()] {
			renamed[b.Address] = b
		}
	}
	var out []BackendChange
	paired := map[string]bool{}
	for i := range v.Backends {
		b := &v.Backends[i]
		ob := old[b.ID()]
		if ob == nil {
			ob = renamed[b.Address]
		}
		if ob != nil {
			paired[ob.ID()] = true
		}
		if c, changed := backendChange(ob, b, v); changed {
			out = append(out, c)
		}
	}
	for i := range o.Backends {
		if b := &o.Backends[i]; !paired[b.ID()] {
			out = append(out, removedBackend(b, v))
		}
	}
	return out
}

// backendChange compares backend b of v with its running counterpart ob
// (nil: b is new).
func backendChange(ob, b *Backend, v *VIP) (BackendChange, bool) {
	c := BackendChange{Op: OpAdd, ID: b.ID(), Address: b.Address, Weight: b.Weight, Effect: EffectNewFlows, Line: b.Line}
	if ob == nil {
		return c, true
	}
	c.Op = OpChange
	replaced := ob.ID() != b.ID() || ob.Address != b.Address || ob.Lookup() != b.Lookup()
	if replaced {
		effect, note := leaves(v)
		c.Effect, c.Note = effect, "a new backend to l4lb, with health unknown until probed and counters from 0; the old one leaves: "+note
	} else if ob.Weight != b.Weight {
		c.Effect, c.Note = weightEffect(b.Weight, v)
	}
	for i := range backendKeys {
		k := &backendKeys[i]
		if old, cur := k.val.text(ob), k.val.text(b); old != cur {
			c.Changes = append(c.Changes, Change{Key: k.name, Old: old, New: cur, Effect: c.Effect})
		}
	}
	return c, len(c.Changes) > 0
}

func removedBackend(b *Backend, v *VIP) BackendChange {
	c := BackendChange{Op: OpRemove, ID: b.ID(), Address: b.Address, Weight: b.Weight}
	c.Effect, c.Note = leaves(v)
	return c
}

// leaves says what happens to the flows on a backend that leaves VIP v
// (removed, or replaced under a new address or identity): new flows avoid
// it at once.
func leaves(v *VIP) (Effect, string) {
	switch {
	case v.Mode == l4.ModeXDP:
		return EffectNewFlows, "its established flows keep it until they end"
	case v.Protocol == l4.UDP:
		return EffectNow, "its sessions move to other backends on their next datagram"
	}
	return EffectNewFlows, "its established connections continue until they end"
}

// weightEffect says when a new weight w of a backend of v applies.
func weightEffect(w int, v *VIP) (Effect, string) {
	switch {
	case w != 0:
		return EffectNewFlows, ""
	case v.Mode == l4.ModeXDP:
		return EffectNewFlows, "drain: no new flows; established flows keep it"
	case v.Protocol == l4.UDP:
		return EffectNow, "drain: its sessions move to other backends on their next datagram"
	}
	return EffectNewFlows, "drain: no new connections; established ones continue"
}

// quoteOrNone quotes a name, or says there is none.
func quoteOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return strconv.Quote(s)
}
