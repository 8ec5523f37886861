// Checks across VIPs: listeners that cannot bind together, backends that
// lead back into l4lb, and warnings about what is legal but surprising.

package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/l4lb/l4lb/l4"
)

// listenKey is the path of vip[i].listen.
func listenKey(i int) string { return fmt.Sprintf("vip[%d].listen", i) }

// binds reports whether the VIP binds a socket (xdp VIPs do not).
func binds(v *VIP) bool { return v.Mode == l4.ModeProxy && v.Listen.IsValid() }

// bindsClash reports whether two sockets of one protocol cannot both bind:
// the same port and family, and one is the family's wildcard (identical
// addresses are reported by checkUnique). An IPv6 wildcard does not clash
// with IPv4: l4lb's IPv6 sockets are IPV6_V6ONLY.
func bindsClash(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Is4() == b.Addr().Is4() &&
		a.Addr() != b.Addr() && (a.Addr().IsUnspecified() || b.Addr().IsUnspecified())
}

// checkBindConflicts reports listeners that `run` could not open together:
// a wildcard and a specific address on one port and protocol, and a TCP
// VIP on the metrics port.
func checkBindConflicts(p *problems, c *Config) {
	for i := range c.VIPs {
		a := &c.VIPs[i]
		if !binds(a) {
			continue
		}
		for j := range i {
			b := &c.VIPs[j]
			if binds(b) && a.Protocol == b.Protocol && bindsClash(a.Listen, b.Listen) {
				p.add(a.Name, listenKey(i), "%s/%s cannot be bound beside vip %q's %s/%s (line %s): a wildcard and a specific address on one port clash",
					a.Protocol, a.Listen, b.Name, b.Protocol, b.Listen, lineString(b.Line))
			}
		}
		if a.Protocol == l4.TCP && metricsClash(c.Global.MetricsListen, a.Listen) {
			p.add(a.Name, listenKey(i), "%s is also metrics_listen %s", a.Listen, c.Global.MetricsListen)
		}
	}
}

// metricsClash reports whether metrics_listen (host:port) and a TCP VIP
// need the same socket address. An empty host listens on every address of
// both families; a host name is not resolved here.
func metricsClash(metrics string, vip netip.AddrPort) bool {
	if metrics == "" {
		return false
	}
	i := strings.LastIndexByte(metrics, ':')
	host, port := strings.Trim(metrics[:i], "[]"), metrics[i+1:]
	if port != fmt.Sprint(vip.Port()) {
		return false
	}
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	m := netip.AddrPortFrom(a.Unmap(), vip.Port())
	return m == vip || bindsClash(m, vip)
}

// reaches reports whether a connection to backend b of a proto VIP lands
// on VIP v's listener without leaving the host: b is v's address, or v
// listens on its family's wildcard and b is a loopback address. (Other
// local addresses are this host's business: see CheckHost.)
func reaches(b netip.AddrPort, proto l4.Protocol, v *VIP) bool {
	if !binds(v) || v.Protocol != proto || b.Port() != v.Listen.Port() {
		return false
	}
	return b == v.Listen || v.Listen.Addr().IsUnspecified() && b.Addr().IsLoopback() && b.Addr().Is4() == v.Listen.Addr().Is4()
}

// checkLoops reports backends that lead back into l4lb in a circle: a VIP
// that is its own backend would connect to itself until the connection
// budget is full and every VIP stops accepting.
func checkLoops(p *problems, vips []VIP) {
	next := make([][]int, len(vips)) // next[i]: the VIPs vip i's backends reach
	for i := range vips {
		for _, b := range vips[i].Backends {
			for j := range vips {
				if b.Address.IsValid() && reaches(b.Address, vips[i].Protocol, &vips[j]) {
					next[i] = append(next[i], j)
				}
			}
		}
	}
	for i := range vips {
		for k, b := range vips[i].Backends {
			for j := range vips {
				if !b.Address.IsValid() || !reaches(b.Address, vips[i].Protocol, &vips[j]) {
					continue
				}
				key := fmt.Sprintf("vip[%d].backend[%d].address", i, k)
				if i == j {
					p.add(vips[i].Name, key, "%s is this VIP's own listener: l4lb would connect to itself", b.Address)
				} else if path := pathTo(next, j, i); path != nil {
					p.add(vips[i].Name, key, "%s is vip %q's listener, which leads back here (%s): a loop", b.Address, vips[j].Name, loopNames(vips, append([]int{i}, path...)))
				}
			}
		}
	}
}

// pathTo returns a path of VIP indexes from -> to in next, or nil.
func pathTo(next [][]int, from, to int) []int {
	seen := make([]bool, len(next))
	var walk func(at int) []int
	walk = func(at int) []int {
		if at == to {
			return []int{at}
		}
		if seen[at] {
			return nil
		}
		seen[at] = true
		for _, n := range next[at] {
			if rest := walk(n); rest != nil {
				return append([]int{at}, rest...)
			}
		}
		return nil
	}
	return walk(from)
}

func loopNames(vips []VIP, path []int) string {
	names := make([]string, len(path))
	for i, v := range path {
		names[i] = fmt.Sprintf("%q", vips[v].Name)
	}
	return strings.Join(names, " -> ")
}

// CheckReload reports what would make a reload from running to next fail:
// a reload opens new listeners before it closes the ones it removes, so a
// new wildcard VIP cannot replace a specific one on its port (or the other
// way round) in one step.
func CheckReload(running, next *Config) []Problem {
	p := newProblems(next.Path, next.lines)
	kept := map[l4.VIPKey]bool{}
	for i := range next.VIPs {
		kept[next.VIPs[i].Key()] = true
	}
	for i := range next.VIPs {
		v := &next.VIPs[i]
		for j := range running.VIPs {
			old := &running.VIPs[j]
			if kept[old.Key()] || !binds(v) || !binds(old) || v.Protocol != old.Protocol || !bindsClash(v.Listen, old.Listen) {
				continue
			}
			p.add(v.Name, listenKey(i), "%s/%s clashes with %s/%s of the running l4lb, which this file removes: a reload binds new listeners before it closes old ones; remove vip %q in one reload, then add this one",
				v.Protocol, v.Listen, old.Protocol, old.Listen, old.Name)
		}
	}
	if e := p.err(); e != nil {
		return e.(*Error).Problems
	}
	return nil
}
