// The host as `l4lb check` and `l4lb run` see it: local addresses, files,
// limits.

package daemon

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

// LoadChecked loads path and checks it against this host: an error for a
// file that is invalid or cannot work here, else the config and its
// warnings (the file's own, then the host's). A file that a user other
// than root or this process's could change is refused (config.LoadTrusted).
func LoadChecked(path string) (*config.Config, []config.Problem, error) {
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

// eventLoops returns how many event loops to run (workers, or one per
// CPU the process may use) and makes room for them in the Go scheduler:
// each loop keeps a P (a Go scheduler slot) nearly all the time, so the
// process gets one more for everything else (health checks, the admin
// API, reloads). Without it a loop blocked in epoll_wait has its P taken
// away as soon as any other goroutine wants to run, and the runtime's
// monitor thread polls at its fastest rate to do so.
func eventLoops(workers int) int {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if runtime.GOMAXPROCS(0) < workers+1 {
		runtime.GOMAXPROCS(workers + 1)
	}
	return workers
}

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit: every
// proxied connection needs two descriptors.
// It returns the limit in force either way.
func raiseFileLimit() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1024, err
	}
	cur := lim.Cur
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return cur, err
	}
	return lim.Cur, nil
}
