// The [global] and [xdp] tables.

package config

import (
	"net"
	"strconv"
	"strings"
	"time"
)

// MaxDrainTimeout is the largest drain_timeout (a service manager's stop
// timeout must be longer).
const MaxDrainTimeout = time.Hour

// MaxWorkers bounds [global] workers.
const MaxWorkers = 1024

// MaxBusyPoll bounds [global] busy_poll: polling longer than a
// millisecond between events saves no wake-up worth the core it burns.
const MaxBusyPoll = time.Millisecond

// Built-in defaults of [global].
const (
	defaultAdminSocket = "/run/l4lb/admin.sock"
	defaultPipeSize    = 1 << 20
	maxUnixSocketPath  = 107 // sun_path is 108 bytes including the NUL
)

// buildGlobal resolves and checks [global].
func buildGlobal(p *problems, g *rawGlobal) Global {
	l := newLayer(p, "", "global", "")
	var none opt[string]
	out := Global{
		LogLevel:      l.oneOf("log_level", g.LogLevel, none, "info", "debug", "info", "warn", "error"),
		LogFormat:     l.oneOf("log_format", g.LogFormat, none, "console", "console", "json"),
		AdminSocket:   l.str("admin_socket", g.AdminSocket, none, defaultAdminSocket),
		MetricsListen: l.str("metrics_listen", g.MetricsListen, none, ""),
		DrainTimeout:  l.duration("drain_timeout", g.DrainTimeout, none, 30*time.Second, span(0, MaxDrainTimeout)),
		PipeSize:      l.integer("pipe_size", g.PipeSize, opt[int64]{}, defaultPipeSize, span[int64](4096, 16<<20)),
		MaxPipes:      l.integer("max_pipes", g.MaxPipes, opt[int64]{}, 0, span[int64](0, 1<<22)),
		Workers:       l.integer("workers", g.Workers, opt[int64]{}, 0, span[int64](0, MaxWorkers)),
		// Off by default for now (docs/operations.md, "Privileges": once, on a loaded
		// machine under the race detector, the drop took 14 s); on, a
		// compromised daemon keeps only what a reload needs.
		DropCapabilities: l.boolean("drop_capabilities", g.DropCaps, opt[bool]{}, false),
		BusyPoll:         l.duration("busy_poll", g.BusyPoll, none, 0, span(0, MaxBusyPoll)),
	}
	buildResolve(l, g, &out)
	out.AdminSocket = checkAdminSocket(l, out.AdminSocket)
	if out.MetricsListen != "" && !isHostPort(out.MetricsListen) {
		l.problem("metrics_listen", "%q is not host:port (such as 127.0.0.1:9370 or [::1]:9370)", out.MetricsListen)
		out.MetricsListen = ""
	}
	return out
}

// checkAdminSocket checks admin_socket and turns "off" into "".
func checkAdminSocket(l *layer, path string) string {
	switch {
	case path == "off":
		return ""
	case !strings.HasPrefix(path, "/"):
		l.problem("admin_socket", "%q must be an absolute path, or \"off\"", path)
	case len(path) > maxUnixSocketPath:
		l.problem("admin_socket", "is %d bytes long; a Unix socket path holds at most %d", len(path), maxUnixSocketPath)
	default:
		return path
	}
	return defaultAdminSocket
}

// isHostPort reports whether s is host:port with a numeric port 1..65535
// (the host may be empty: all addresses).
func isHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || !isToken(host) {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// buildXDP resolves and checks [xdp]; nil when the file has none.
func buildXDP(p *problems, x *rawXDP) *XDP {
	if x == nil {
		return nil
	}
	l := newLayer(p, "", "xdp", "")
	var none opt[string]
	out := &XDP{
		Interface:        l.str("interface", x.Interface, none, ""),
		Attach:           l.oneOf("attach", x.Attach, none, "driver", "driver", "generic"),
		PinPath:          l.str("pin_path", x.PinPath, none, ""),
		ConntrackSize:    l.integer("conntrack_size", x.ConntrackSize, opt[int64]{}, 1<<20, span[int64](1024, 1<<26)),
		WeightRefresh:    l.duration("weight_refresh", x.WeightRefresh, none, 5*time.Second, span(time.Second, time.Hour)),
		SYNRatePerSource: l.integer("syn_rate_per_source", x.SYNRate, opt[int64]{}, 0, span[int64](0, 10_000_000)),
	}
	switch {
	case !l.has("interface"):
		l.problem("interface", "is required: the interface the XDP program attaches to")
	case !validIfName(out.Interface):
		l.problem("interface", "%q is not an interface name (1 to 15 bytes, no /, : or spaces)", out.Interface)
	}
	if out.PinPath != "" && !strings.HasPrefix(out.PinPath, "/") {
		l.problem("pin_path", "%q must be an absolute path", out.PinPath)
	}
	return out
}

// validIfName mirrors the kernel's dev_valid_name.
func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return isToken(s) && !strings.ContainsAny(s, "/:")
}
