// The host as `l4lb check` and `l4lb run` see it: local addresses, files.
package main

import (
	"io/fs"
	"net"
	"net/netip"
	"os"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// osHost answers config.CheckHost from this machine.
type osHost struct{}

func (osHost) LocalAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

func (osHost) Lstat(path string) (fs.FileInfo, error) { return os.Lstat(path) }

func (osHost) HasInterface(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// loadChecked loads path and checks it against this host: an error for a
// file that is invalid or cannot work here, else the config and its
// warnings (the file's own, then the host's). A file that a user other
// than root or this process's could change is refused (config.LoadTrusted).
func loadChecked(path string) (*config.Config, []config.Problem, error) {
	cfg, err := config.LoadTrusted(path, os.Geteuid())
	if err != nil {
		return nil, nil, err
	}
	problems, warnings := config.CheckHost(cfg, osHost{})
	problems = append(problems, reconcile.CheckModes(cfg)...)
	if len(problems) > 0 {
		return nil, nil, &config.Error{Problems: problems}
	}
	return cfg, append(append([]config.Problem(nil), cfg.Warnings...), warnings...), nil
}
