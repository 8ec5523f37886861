// What Diff compares in [global], [xdp] and a VIP's keys, through the key
// tables, which say when a reload applies each.

package config

import (
	"fmt"
	"strconv"
	"strings"
)

func diffGlobal(o, v *Global) []Change {
	return compare(globalKeys, "global.", o, v, func(*key[Global]) bool { return true })
}

// diffXDP compares the [xdp] tables. loaded: the running l4lb's XDP
// program is loaded; starts: next has an xdp VIP (a reload then loads the
// program if it is not).
func diffXDP(o, v *XDP, loaded, starts bool) []Change {
	switch {
	case o == nil && v == nil:
		return nil
	case o != nil && v != nil:
		ch := compare(xdpKeys, "xdp.", o, v, func(*key[XDP]) bool { return true })
		for i := range ch {
			if !loaded && ch[i].Effect == EffectRestart {
				ch[i].Effect = EffectNow
			}
		}
		return ch
	}
	c := Change{Key: "xdp", Old: xdpTable(o), New: xdpTable(v), Effect: EffectNow}
	switch {
	case loaded && v == nil:
		c.Effect, c.Note = EffectRestart, "the XDP program stays loaded until l4lb restarts"
	case loaded:
		c.Effect, c.Note = EffectRestart, "the XDP program loaded at start keeps its settings until l4lb restarts"
	case starts:
		c.Note = "the XDP program loads with the first xdp VIP"
	}
	return []Change{c}
}

// xdpTable sums up an [xdp] table for a Change.
func xdpTable(x *XDP) string {
	if x == nil {
		return "(none)"
	}
	return fmt.Sprintf("interface %s, attach %s", strings.Join(x.Interfaces, " "), x.Attach)
}

// vipSettings compares the VIP keys that apply to v (a key that only
// applied to o went with the setting that made it apply: an algorithm,
// a mode).
func vipSettings(o, v *VIP) []Change {
	return compare(vipKeys, "", o, v, func(k *key[VIP]) bool { return k.applies(v) })
}

// healthSettings compares health checks. The keys of one check type are
// compared only while the type stays (a new type restarts everything). A
// running config printed by the admin API has its passwords redacted:
// those are not compared.
func healthSettings(o, v *Health) []Change {
	applies := func(k *key[Health]) bool {
		switch {
		case k.name == "password" && o.Password == Redacted && v.Password != "":
			return false
		case o.Type != v.Type:
			return k.scope == nil
		}
		return k.applies(v)
	}
	out := compare(healthKeys, "health.", o, v, applies)
	for i := range out {
		if out[i].Key == "health.password" {
			out[i].Old, out[i].New = secret(o.Password), secret(v.Password)
		}
	}
	return out
}

func offIfEmpty(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// quoteBytes prints check bytes as a quoted string (escapes for the rest).
func quoteBytes(b []byte) string { return strconv.Quote(string(b)) }

// secret hides a password: only whether there is one shows.
func secret(s string) string {
	if s == "" {
		return "(none)"
	}
	return Redacted
}

// routesText sums up a VIP's SNI routes for a Change: each route's name,
// server names, algorithm, health check and backends.
func routesText(rs []Route) string {
	if len(rs) == 0 {
		return "(none)"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		bs := make([]string, len(r.Backends))
		for j, b := range r.Backends {
			bs[j] = fmt.Sprintf("%s=%s/%d", b.ID(), b.Address, b.Weight)
			if b.Backup {
				bs[j] += "/backup"
			}
		}
		h := r.Health
		match := fmt.Sprint(r.Names)
		if len(r.Databases)+len(r.Users) > 0 {
			match += fmt.Sprintf(" database %v user %v", r.Databases, r.Users)
		}
		parts[i] = fmt.Sprintf("%s %s %s health %s/%s/%s/%d/%d/%d/%s [%s]", r.Name, match, r.Algorithm, h.Type, fmtDuration(h.Interval),
			fmtDuration(h.Timeout), h.Rise, h.Fall, h.Port, h.OnDown, strings.Join(bs, " "))
	}
	return strings.Join(parts, "; ")
}
