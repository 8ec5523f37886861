// Checks that depend on the machine: what is at the admin socket's path,
// which addresses are local. The caller answers through Host, so this
// package still does no I/O of its own and the checks test without a host.

package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/l4lb/l4lb/l4"
)

// Host answers what the host checks need to know.
type Host interface {
	// LocalAddrs returns the addresses of this host's interfaces.
	LocalAddrs() ([]netip.Addr, error)
	// Lstat describes what is at path (without following a symlink).
	Lstat(path string) (fs.FileInfo, error)
	// HasInterface reports whether the host has a network interface so named.
	HasInterface(name string) bool
	// CPUs returns how many CPUs this process may run on.
	CPUs() int
	// FileLimit returns the hard open-file limit (RLIMIT_NOFILE), which
	// `l4lb run` raises its own to.
	FileLimit() (uint64, error)
	// Memory returns the host's memory in bytes.
	Memory() (uint64, error)
}

// CheckHost checks cfg against the host: problems would make `l4lb run`
// fail or misbehave there; warnings are probably wrong. A question the host
// cannot answer becomes a warning: check then says what it could not check.
func CheckHost(cfg *Config, h Host) (problems, warnings []Problem) {
	p := newProblems(cfg.Path, cfg.lines)
	if cfg.Global.AdminSocket != "" {
		checkAdminPath(p, cfg.Global.AdminSocket, h)
	}
	local, err := h.LocalAddrs()
	if err != nil {
		p.warn("", "", "cannot list local addresses (%v): VIP addresses and backend loops not checked against them", err)
	} else {
		checkLocal(p, cfg.VIPs, local)
	}
	for _, warn := range hostWarnings {
		warn(p, cfg, h)
	}
	if e := p.err(); e != nil {
		problems = e.(*Error).Problems
	}
	sortProblems(p.warnings)
	return problems, p.warnings
}

// checkAdminPath refuses an admin_socket path that holds anything but a
// socket: l4lb replaces a stale socket there, and must never remove a file
// (the config file itself, say) or a directory instead.
func checkAdminPath(p *problems, path string, h Host) {
	fi, err := h.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		p.add("", "global.admin_socket", "%s exists and is %s, not a socket: l4lb removes only sockets, choose another path", path, describeMode(fi.Mode()))
	case err != nil && !isNotExist(err):
		p.warn("", "global.admin_socket", "cannot check %s: %v", path, err)
	}
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// describeMode names a file's type for a message.
func describeMode(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeSymlink:
		return "a symbolic link"
	}
	return fileKind(m)
}

// checkLocal refuses backends that are this host's own listeners (through
// a wildcard VIP) and warns about VIP addresses no interface has.
func checkLocal(p *problems, vips []VIP, local []netip.Addr) {
	isLocal := func(a netip.Addr) bool { return a.IsLoopback() || slices.Contains(local, a) }
	for i := range vips {
		v := &vips[i]
		if binds(v) && !v.Freebind && !v.Listen.Addr().IsUnspecified() && !isLocal(v.Listen.Addr()) {
			p.warn(v.Name, listenKey(i), "no interface has %s, so `l4lb run` will fail to bind it; set freebind = true if keepalived or a BGP speaker adds it later",
				v.Listen.Addr())
		}
		for k, b := range v.Backends {
			for j := range vips {
				w := &vips[j]
				if binds(w) && w.Protocol == v.Protocol && w.Listen.Addr().IsUnspecified() && b.Address.Port() == w.Listen.Port() &&
					b.Address.Addr().Is4() == w.Listen.Addr().Is4() && isLocal(b.Address.Addr()) && !b.Address.Addr().IsLoopback() {
					p.add(v.Name, fmt.Sprintf("vip[%d].backend[%d].address", i, k), "%s is a local address, and vip %q listens on %s: l4lb would connect to itself",
						b.Address, w.Name, w.Listen)
				}
			}
		}
	}
}

// hostWarnings are the warnings that depend on the host (see warnings.go).
var hostWarnings = []func(p *problems, c *Config, h Host){
	warnXDPInterface,
	warnWorkers,
	warnPipes,
	warnSessions,
}

// warnXDPInterface: the XDP program cannot attach to an interface the
// host lacks; said only when the program is attached at all.
func warnXDPInterface(p *problems, c *Config, h Host) {
	if !c.AttachesXDP() {
		return
	}
	for _, name := range c.XDP.Interfaces {
		if !h.HasInterface(name) {
			p.warn("", "xdp.interface", "this host has no interface %q: `l4lb run` will fail to attach the XDP program", name)
		}
	}
}

// warnWorkers: each event loop is a thread that keeps a scheduler slot
// nearly all the time, so loops beyond the CPUs only take turns.
func warnWorkers(p *problems, c *Config, h Host) {
	if n := h.CPUs(); c.Global.Workers > n {
		p.warn("", "global.workers", "%d event loops on %d CPUs: a loop beyond one per CPU only adds context switches and memory; 0 (the default) runs one per CPU",
			c.Global.Workers, n)
	}
}

// warnPipes: every splice pipe may hold pipe_size bytes of kernel memory,
// which cannot be swapped out.
func warnPipes(p *problems, c *Config, h Host) {
	g := &c.Global
	mem, err := h.Memory()
	if g.MaxPipes == 0 || err != nil {
		return // the default follows the connection budget
	}
	if total := uint64(g.MaxPipes) * uint64(g.PipeSize); total > mem {
		p.warn("", "global.max_pipes", "max_pipes %d x pipe_size %s = %s of pipe buffers, more than this host's %s of memory: "+
			"full pipes hold kernel memory that cannot be swapped; 0 (the default) follows the connection limit", g.MaxPipes, fmtBytes(uint64(g.PipeSize)), fmtBytes(total), fmtBytes(mem))
	}
}

// warnSessions: each UDP session holds a socket, and UDP sessions are not
// counted in the connection budget the open-file limit sets: past the
// limit new sessions fail (EMFILE) instead of waiting at max_sessions.
// Said only for max_sessions the file sets, not for the built-in default.
func warnSessions(p *problems, c *Config, h Host) {
	limit, err := h.FileLimit()
	if err != nil {
		return
	}
	total, udp, top := 0, 0, -1
	at := -1 // the VIP whose max_sessions the warning is at; -1: [defaults]
	for i := range c.VIPs {
		v := &c.VIPs[i]
		if v.Protocol != l4.UDP || v.Mode != l4.ModeProxy {
			continue
		}
		total += v.MaxSessions
		udp++
		if top < 0 || v.MaxSessions > c.VIPs[top].MaxSessions {
			top = i
		}
		if p.lines.has(sessionsKey(i)) && (at < 0 || v.MaxSessions > c.VIPs[at].MaxSessions) {
			at = i
		}
	}
	if uint64(total) <= limit || at < 0 && !p.lines.has("defaults.max_sessions") {
		return // within the limit, or l4lb's own default
	}
	what := fmt.Sprintf("max_sessions %d", c.VIPs[top].MaxSessions)
	if udp > 1 {
		what = fmt.Sprintf("max_sessions of the udp VIPs add up to %d, which", total)
	}
	vip, key := "", "defaults.max_sessions"
	if at >= 0 {
		vip, key = c.VIPs[at].Name, sessionsKey(at)
	}
	p.warn(vip, key, "%s is more than the open-file limit %d: each session holds a socket, "+
		"so sessions past about %d fail (EMFILE) instead of being refused at max_sessions; raise the limit (LimitNOFILE) or lower max_sessions",
		what, limit, limit)
}

func sessionsKey(i int) string { return fmt.Sprintf("vip[%d].max_sessions", i) }

// fmtBytes prints a size in binary units: 512 B, 16 MiB, 64 TiB.
func fmtBytes(n uint64) string {
	v, unit := l4.BinaryUnits(n)
	if unit == "B" {
		return fmt.Sprintf("%d B", n)
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + " " + unit
}
