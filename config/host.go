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
)

// Host answers what the host checks need to know.
type Host interface {
	// LocalAddrs returns the addresses of this host's interfaces.
	LocalAddrs() ([]netip.Addr, error)
	// Lstat describes what is at path (without following a symlink).
	Lstat(path string) (fs.FileInfo, error)
	// HasInterface reports whether the host has a network interface so named.
	HasInterface(name string) bool
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
	if cfg.XDP != nil && !h.HasInterface(cfg.XDP.Interface) {
		p.warn("", "xdp.interface", "this host has no interface %q: `l4lb run` will fail to attach the XDP program", cfg.XDP.Interface)
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
