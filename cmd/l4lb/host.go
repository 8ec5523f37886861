// The host as `l4lb check` and `l4lb run` see it: local addresses, files.

package main

import (
	"io/fs"
	"net"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

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

func (osHost) CPUs() int { return runtime.NumCPU() }

// FileLimit is the hard limit: run raises its soft limit to it (raiseFileLimit).
func (osHost) FileLimit() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Max, nil
}

func (osHost) Memory() (uint64, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, err
	}
	return uint64(si.Totalram) * uint64(si.Unit), nil
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
