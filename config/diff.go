// Diff: what a reload from the running config to another one changes in a
// running l4lb, and when each change reaches its traffic.

package config

import (
	"net/netip"
	"slices"

	"github.com/l4lb/l4lb/l4"
)

// Effect says when a change made by a reload reaches a running l4lb.
type Effect string

const (
	// EffectNow: the reload applies it at once, to flows in progress too.
	EffectNow Effect = "now"
	// EffectNewFlows: new connections, sessions or flows get it;
	// established ones keep what they started with.
	EffectNewFlows Effect = "new_flows"
	// EffectVIPRestart: the VIP's mode changes, so it restarts on the
	// other data plane: new flows take it, established flows stay on the
	// old one until they end or drain_timeout.
	EffectVIPRestart Effect = "vip_restart"
	// EffectNextBind: an option of the VIP's listening socket, which is
	// already bound: it applies when the socket is next opened (a restart
	// of l4lb, or the VIP removed and added back).
	EffectNextBind Effect = "next_bind"
	// EffectRestart: a reload keeps the running value (and logs a
	// warning); only a restart of l4lb applies it.
	EffectRestart Effect = "restart"
)

// Op is what a reload does to a VIP or a backend.
type Op string

// The ops of a VIPChange or BackendChange.
const (
	OpAdd    Op = "add"
	OpRemove Op = "remove"
	OpChange Op = "change"
)

// Change is one setting whose value differs.
type Change struct {
	Key    string `json:"key"` // global.pipe_size, xdp.interface; in a VIP: algorithm, health.interval; in a backend: weight, address, name
	Old    string `json:"old"`
	New    string `json:"new"`
	Effect Effect `json:"effect"`
	Note   string `json:"note,omitempty"` // what else the running l4lb does about it
}

// BackendChange is a backend that a reload adds to, removes from or
// changes in a VIP it keeps. A backend is known to the running l4lb by its
// identity (name, else address) and address: a new address or a new name
// makes it a new backend, and the old one goes as if removed.
type BackendChange struct {
	Op      Op             `json:"op"`
	ID      string         `json:"id"`      // the identity in the new file (the old one for a removed backend)
	Address netip.AddrPort `json:"address"` // likewise
	Weight  int            `json:"weight"`
	Effect  Effect         `json:"effect"`
	Changes []Change       `json:"changes,omitempty"` // Op change: name, address, weight
	Note    string         `json:"note,omitempty"`
	Line    int            `json:"line,omitempty"` // in the new file; 0 for a removed backend
}

// VIPChange is a VIP that a reload adds, removes or changes. The running
// l4lb knows a VIP by its listen address and protocol: a new name on the
// same address is a change, a new address is another VIP.
type VIPChange struct {
	Op        Op              `json:"op"`
	Name      string          `json:"name"` // the name in the new file (the old one for a removed VIP)
	Listen    netip.AddrPort  `json:"listen"`
	Protocol  string          `json:"protocol"`
	Mode      string          `json:"mode"`
	Algorithm string          `json:"algorithm"`
	Backends  int             `json:"backends"`           // how many it has (a removed VIP: had)
	Settings  []Change        `json:"settings,omitempty"` // Op change
	Members   []BackendChange `json:"backend_changes,omitempty"`
	Note      string          `json:"note,omitempty"`
	Line      int             `json:"line,omitempty"` // in the new file; 0 for a removed VIP
}

// Changes is everything a reload would change, in the new file's order
// (removed VIPs and backends last).
type Changes struct {
	Global []Change    `json:"global"` // [global] and [xdp]
	VIPs   []VIPChange `json:"vips"`
}

// Empty reports whether a reload would change nothing.
func (c *Changes) Empty() bool { return len(c.Global) == 0 && len(c.VIPs) == 0 }

// DiffOptions tell Diff what the config alone does not say about the
// running l4lb. The zero value assumes the least.
type DiffOptions struct {
	// XDPLoaded: the running l4lb has its XDP program loaded (its status
	// shows xdp). The program loads with the first config that has an
	// xdp VIP and stays until l4lb exits, so its [xdp] keys then need a
	// restart. Diff assumes it loaded when the running config has an xdp
	// VIP, whatever this says.
	XDPLoaded bool
}

// Diff lists what a reload from running (the config an l4lb runs, as its
// admin API prints it) to next would change, and when each change takes
// effect, as l4/reconcile applies it. It reads nothing but its arguments.
func Diff(running, next *Config, opts DiffOptions) Changes {
	return Changes{Global: diffSettings(running, next, opts), VIPs: diffVIPs(running, next)}
}

// diffSettings compares the process-wide tables: [global], [xdp], [bgp].
func diffSettings(running, next *Config, opts DiffOptions) []Change {
	loaded := opts.XDPLoaded || running.HasXDPVIP()
	return slices.Concat(diffGlobal(&running.Global, &next.Global), diffXDP(running.XDP, next.XDP, loaded, next.HasXDPVIP()), diffBGP(running.BGP, next.BGP), diffFlowSync(running.FlowSync, next.FlowSync))
}

// RestartOnly lists the keys (global.pipe_size, xdp.interface...) whose
// change a reload from running to next cannot apply. It takes the XDP
// program as loaded when running has an [xdp] table.
func RestartOnly(running, next *Config) []string {
	c := Changes{Global: diffSettings(running, next, DiffOptions{XDPLoaded: running.XDP != nil})}
	var keys []string
	for _, ch := range c.NeedRestart() {
		keys = append(keys, ch.Key)
	}
	return keys
}

// PlanReload is what a reload from running to next does to the config,
// in one place for the daemon: problems that refuse it (CheckReload), else
// the config it leaves in force (InForce) and the changed keys only a
// restart applies (RestartOnly). The VIPs are compared once, by the
// runtime that applies inForce.
func PlanReload(running, next *Config) (inForce *Config, restartOnly []string, problems []Problem) {
	if problems := CheckReload(running, next); len(problems) > 0 {
		return nil, nil, problems
	}
	return InForce(running, next), RestartOnly(running, next), nil
}

// RestartWarnings are the warnings `l4lb check` gives, with and without
// --diff, for the settings of next that differ from running's but that a
// reload cannot change (RestartOnly), each at its line in next.
func RestartWarnings(running, next *Config) []Problem {
	var out []Problem
	for _, key := range RestartOnly(running, next) {
		out = append(out, Problem{File: next.Path, Line: next.lines.line(key), Key: key,
			Msg: "differs from the running l4lb's; a reload keeps the running value, a restart applies it"})
	}
	return out
}

// InForce is the config a reload from running to next leaves in force:
// next, with the running values of the settings that need a restart
// (those RestartOnly lists), so that what the running process reports
// (status --show-config, and the base of the next check --diff) is what
// it really uses. next is not modified.
func InForce(running, next *Config) *Config {
	out := *next
	keepRestartOnly(globalKeys, &out.Global, &running.Global)
	if running.XDP != nil && next.XDP != nil {
		x := *next.XDP
		keepRestartOnly(xdpKeys, &x, running.XDP)
		out.XDP = &x
	}
	return &out
}

// diffVIPs pairs VIPs by listen address and protocol, as the runtime does.
func diffVIPs(running, next *Config) []VIPChange {
	old := make(map[l4.VIPKey]*VIP, len(running.VIPs))
	for i := range running.VIPs {
		old[running.VIPs[i].Key()] = &running.VIPs[i]
	}
	var out []VIPChange
	kept := map[l4.VIPKey]bool{}
	for i := range next.VIPs {
		v := &next.VIPs[i]
		o, ok := old[v.Key()]
		if !ok {
			out = append(out, addedVIP(v, running, next))
		} else if c := changedVIP(o, v); c != nil {
			out = append(out, *c)
		}
		kept[v.Key()] = ok
	}
	for i := range running.VIPs {
		if o := &running.VIPs[i]; !kept[o.Key()] {
			out = append(out, removedVIP(o, running, next))
		}
	}
	return out
}

// vipChange is the part of a VIPChange that describes v.
func vipChange(op Op, v *VIP) VIPChange {
	return VIPChange{Op: op, Name: v.Name, Listen: v.Listen, Protocol: v.Protocol.String(), Mode: v.Mode.String(),
		Algorithm: v.Algorithm.String(), Backends: len(v.Backends)}
}

func addedVIP(v *VIP, running, next *Config) VIPChange {
	c := vipChange(OpAdd, v)
	c.Line, c.Note = v.Line, "starts"
	if o := running.VIP(v.Name); o != nil && !hasKey(next, o.Key()) {
		c.Note += "; it replaces the running VIP of this name on " + o.Key().String() + ", which is removed"
	}
	return c
}

// hasKey reports whether c has a VIP on key.
func hasKey(c *Config, key l4.VIPKey) bool {
	for i := range c.VIPs {
		if c.VIPs[i].Key() == key {
			return true
		}
	}
	return false
}

// removedVIP says what happens to the flows of a VIP the reload removes:
// a removed VIP drains for the new file's drain_timeout.
func removedVIP(o *VIP, running, next *Config) VIPChange {
	c := vipChange(OpRemove, o)
	drain := fmtDuration(next.Global.DrainTimeout)
	switch {
	case o.Mode == l4.ModeXDP:
		c.Note = "new flows are dropped; established flows are forwarded until they end, for up to " + drain + " (drain_timeout)"
	case o.Protocol == l4.UDP:
		c.Note = "stops at once: its sessions end (a UDP VIP does not drain)"
	case next.Global.DrainTimeout == 0:
		c.Note = "stops accepting; its connections are reset at once (drain_timeout 0s)"
	default:
		c.Note = "stops accepting; its connections have " + drain + " (drain_timeout) to finish, then are reset"
	}
	if v := next.VIP(o.Name); v != nil && !hasKey(running, v.Key()) {
		c.Note += "; its name moves to the new VIP on " + v.Key().String()
	}
	return c
}

// changedVIP lists what differs between the running VIP o and v (same
// listen address and protocol), or returns nil when nothing does.
func changedVIP(o, v *VIP) *VIPChange {
	c := vipChange(OpChange, v)
	c.Line = v.Line
	moved := o.Mode != v.Mode
	c.Settings = append(c.Settings, vipSettings(o, v)...)
	c.Settings = append(c.Settings, healthSettings(&o.Health, &v.Health)...)
	c.Members = backendChanges(o, v)
	if len(c.Settings) == 0 && len(c.Members) == 0 {
		return nil
	}
	if moved {
		restartAll(&c)
	}
	return &c
}

// restartAll marks every change of a VIP whose mode changes: the VIP
// restarts, so nothing carries over.
func restartAll(c *VIPChange) {
	for i := range c.Settings {
		if c.Settings[i].Key != "mode" {
			c.Settings[i].Effect, c.Settings[i].Note = EffectVIPRestart, ""
		}
	}
	for i := range c.Members {
		c.Members[i].Effect, c.Members[i].Note = EffectVIPRestart, ""
	}
}
