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
func buildGlobal(p *problems, own rawTable) Global {
	var out Global
	resolveKeys(newLayer(p, "", "global", ""), globalKeys, own, nil, &out)
	return out
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
func buildXDP(p *problems, file rawTable) *XDP {
	if !file.has("xdp") {
		return nil
	}
	out := &XDP{}
	resolveKeys(newLayer(p, "", "xdp", ""), xdpKeys, file.table("xdp"), nil, out)
	return out
}

// validIfName mirrors the kernel's dev_valid_name.
func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return isToken(s) && !strings.ContainsAny(s, "/:")
}
