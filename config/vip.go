// A [[vip]] table: identity, balancing and proxy settings, backends.

package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// buildVIP resolves and checks vip[i]; c holds the file's [global], [xdp]
// and [bgp], already built.
func buildVIP(p *problems, i int, rv *rawVIP, def *rawTuning, c *Config) VIP {
	own := fmt.Sprintf("vip[%d]", i)
	l := newLayer(p, rv.Name.val, own, "defaults")
	v := VIP{Line: p.lines.line(own)}
	vipIdentity(l, rv, &v)
	vipBalancing(l, &rv.rawTuning, def, &v)
	vipTraffic(l, &rv.rawTuning, def, &v)
	v.Health = buildHealth(l.sub("health"), &rv.Health, &def.Health, v.Protocol, sentProxyProtocol(&v))
	v.Backends = buildBackends(l, rv.Backends)
	v.Routes = buildRoutes(l, rv, def, &v)
	checkScopes(l, &v)
	checkAccess(l, &v)
	checkBackups(l, &v)
	checkBackendCaps(l, &v)
	checkMaglev(l, &v)
	if v.Mode == l4.ModeXDP {
		checkXDPVIP(l, &v, c.XDP != nil)
	}
	warnVIP(l, &v, c)
	return v
}

// vipIdentity resolves name, listen and protocol, which [defaults] cannot set.
func vipIdentity(l *layer, rv *rawVIP, v *VIP) {
	var none opt[string]
	v.Name = l.str("name", rv.Name, none, "")
	switch {
	case !l.has("name"):
		l.problem("name", "is required")
	case l.ok("name"):
		l.checkName("name", v.Name)
	}
	v.Protocol = parsed(l, "protocol", rv.Protocol, none, l4.TCP, parseProtocol, []string{"tcp", "udp"})
	v.Listen = l.addrPort("listen", rv.Listen)
}

// parseProtocol maps tcp and udp to their protocols.
func parseProtocol(s string) (l4.Protocol, bool) {
	p, err := l4.ParseProtocol(s)
	return p, err == nil
}

// addrPort resolves a required ip:port key of the table itself.
func (l *layer) addrPort(key string, own opt[string]) netip.AddrPort {
	s := l.str(key, own, opt[string]{}, "")
	if !l.has(key) {
		l.problem(key, "is required (ip:port)")
	}
	if !l.ok(key) {
		return netip.AddrPort{}
	}
	ap, err := parseAddrPort(s)
	if err != nil {
		l.problem(key, "%v", err)
	}
	return ap
}

// vipBalancing resolves mode and the balancing keys.
func vipBalancing(l *layer, o, d *rawTuning, v *VIP) {
	v.Mode = enum(l, "mode", o.Mode, d.Mode, l4.ModeProxy, l4.ModeNames())
	algorithm := l4.RoundRobin
	if v.Mode == l4.ModeXDP {
		algorithm = l4.Maglev
	}
	v.Algorithm = enum(l, "algorithm", o.Algorithm, d.Algorithm, algorithm, l4.AlgorithmNames())
	// source_hash keeps a client on its backend; maglev in xdp mode
	// spreads one client's flows as the kernel's ECMP does.
	hashKey := l4.HashSrcIP
	if v.Mode == l4.ModeXDP && v.Algorithm == l4.Maglev {
		hashKey = l4.HashFiveTuple
	}
	v.HashKey = enum(l, "hash_key", o.HashKey, d.HashKey, hashKey, l4.HashKeyNames())
	v.HashBalanceFactor = l.integer("hash_balance_factor", o.HashBalanceFactor, d.HashBalanceFactor, 0, orOff[int64](100, 1000))
	v.MaglevTableSize = l.integer("maglev_table_size", o.MaglevTableSize, d.MaglevTableSize, 65537, span[int64](1009, 1000003))
	if !isPrime(v.MaglevTableSize) {
		l.problem("maglev_table_size", "%d is not a prime (try 1009, 10007, 65537, 655373 or 1000003)", v.MaglevTableSize)
		v.MaglevTableSize = 65537
	}
	v.LeastTimeDefault = l.duration("least_time_default", o.LeastTimeDefault, d.LeastTimeDefault, time.Millisecond, span(time.Microsecond, 10*time.Second))
	v.LeastTimeBias = l.duration("least_time_bias", o.LeastTimeBias, d.LeastTimeBias, time.Millisecond, span(0, 10*time.Second))
	v.LeastTimeAlpha = l.float("least_time_alpha", o.LeastTimeAlpha, d.LeastTimeAlpha, 0.3)
	if !(v.LeastTimeAlpha > 0 && v.LeastTimeAlpha <= 1) {
		l.problem("least_time_alpha", "%v is out of range (0, 1]", v.LeastTimeAlpha)
		v.LeastTimeAlpha = 0.3
	}
	v.LeastTimeMetric = enum(l, "least_time_metric", o.LeastTimeMetric, d.LeastTimeMetric, l4.MetricConnect, l4.RTTMetricNames())
}

// vipTraffic resolves the TCP proxy, UDP and XDP forwarding keys.
func vipTraffic(l *layer, o, d *rawTuning, v *VIP) {
	v.ConnectTimeout = l.duration("connect_timeout", o.ConnectTimeout, d.ConnectTimeout, 2*time.Second, span(time.Millisecond, 5*time.Minute))
	v.Retries = l.integer("retries", o.Retries, d.Retries, 2, span[int64](0, 15))
	v.IdleTimeout = l.duration("idle_timeout", o.IdleTimeout, d.IdleTimeout, time.Hour, span(time.Second, 7*24*time.Hour))
	v.KeepAlive = l.duration("keepalive", o.KeepAlive, d.KeepAlive, time.Minute, orOff(time.Second, 2*time.Hour))
	v.MaxConns = l.integer("max_conns", o.MaxConns, d.MaxConns, 0, span[int64](0, 10_000_000))
	v.ProxyProtocol = enum(l, "proxy_protocol", o.ProxyProtocol, d.ProxyProtocol, l4.ProxyOff, l4.ProxyVersionNames())
	v.AcceptProxyProtocol = enum(l, "accept_proxy_protocol", o.AcceptProxy, d.AcceptProxy, l4.AcceptProxyOff, l4.ProxyAcceptNames())
	v.AcceptProxyProtocolFrom = l.prefixes("accept_proxy_protocol_from", o.AcceptProxyFrom, d.AcceptProxyFrom)
	v.Freebind = l.boolean("freebind", o.Freebind, d.Freebind, false)
	v.DeferAccept = l.boolean("defer_accept", o.DeferAccept, d.DeferAccept, false)
	v.Announce = l.boolean("announce", o.Announce, d.Announce, true)
	v.FirstByteTimeout = l.duration("first_byte_timeout", o.FirstByteTimeout, d.FirstByteTimeout, 0, orOff(time.Millisecond, time.Hour))
	v.QueueTimeout = l.duration("queue_timeout", o.QueueTimeout, d.QueueTimeout, 5*time.Second, orOff(time.Millisecond, time.Hour))
	v.SNITimeout = l.duration("sni_timeout", o.SNITimeout, d.SNITimeout, 5*time.Second, span(time.Millisecond, 5*time.Minute))
	v.SNINoMatch = enum(l, "sni_no_match", o.SNINoMatch, d.SNINoMatch, l4.SNINoMatchDefault, l4.SNINoMatchNames())
	v.AffinityTimeout = l.duration("affinity_timeout", o.AffinityTimeout, d.AffinityTimeout, 0, span(0, 24*time.Hour))
	v.RebalanceRate = l.integer("rebalance_rate", o.RebalanceRate, d.RebalanceRate, 10, span[int64](0, MaxRebalanceRate))
	v.SessionTimeout = l.duration("session_timeout", o.SessionTimeout, d.SessionTimeout, 30*time.Second, span(time.Second, time.Hour))
	v.MaxSessions = l.integer("max_sessions", o.MaxSessions, d.MaxSessions, 65536, span[int64](1, 16<<20))
	v.UDPResponses = l.integer("udp_responses", o.UDPResponses, d.UDPResponses, 0, span[int64](0, 65535))
	v.BackupMode = enum(l, "backup_mode", o.BackupMode, d.BackupMode, l4.BackupFirst, l4.BackupModeNames())
	v.Forward = enum(l, "forward", o.Forward, d.Forward, l4.ForwardIPIP, l4.ForwardNames())
	v.NewFlowRate = l.integer("new_flow_rate", o.NewFlowRate, d.NewFlowRate, 0, span[int64](0, 100_000_000))
	v.Allow = l.prefixes("allow", o.Allow, d.Allow)
	v.Deny = l.prefixes("deny", o.Deny, d.Deny)
	v.MaxConnsPerClient = l.integer("max_conns_per_client", o.MaxConnsPerClient, d.MaxConnsPerClient, 0, span[int64](0, 10_000_000))
	v.ConnRatePerClient = l.integer("conn_rate_per_client", o.ConnRatePerClient, d.ConnRatePerClient, 0, span[int64](0, 10_000_000))
	v.MaxSessionsPerClient = l.integer("max_sessions_per_client", o.MaxSessionsPerClient, d.MaxSessionsPerClient, 0, span[int64](0, 16<<20))
	v.LogConnections = l.boolean("log_connections", o.LogConnections, d.LogConnections, false)
	v.LogConnectionsRate = l.integer("log_connections_rate", o.LogConnectionsRate, d.LogConnectionsRate, 1000, span[int64](0, 1_000_000))
}

// buildBackends resolves and checks the backends of the VIP of l.
func buildBackends(l *layer, raws []rawBackend) []Backend {
	if len(raws) == 0 {
		l.problem("backend", "at least one [[vip.backend]] is required")
		return nil
	}
	out := make([]Backend, 0, len(raws))
	seen := backendsSeen{id: map[string]string{}, addr: map[netip.AddrPort]string{}}
	for j := range raws {
		own := fmt.Sprintf("%s.backend[%d]", l.own, j)
		b := buildBackend(newLayer(l.p, l.vip, own, ""), &raws[j])
		seen.check(l, own, b)
		out = append(out, b)
	}
	return out
}

// backendsSeen finds backends of a VIP that repeat an identity or an address.
type backendsSeen struct {
	id   map[string]string         // identity -> path of the first backend with it
	addr map[netip.AddrPort]string // address -> path of the first backend with it
}

// check reports b, at own, if an earlier backend has its identity or address.
func (s backendsSeen) check(l *layer, own string, b Backend) {
	if b.Name == "" && !b.Address.IsValid() && !b.IsNamed() {
		return // no identity; its address problem is reported
	}
	if prev, dup := s.id[b.ID()]; dup {
		key := own + ".name"
		if b.Name == "" {
			key = own + ".address"
		}
		l.p.add(l.vip, key, "backend %q is defined twice (first as %s)", b.ID(), prev)
		return
	}
	s.id[b.ID()] = own
	if !b.Address.IsValid() {
		return
	}
	if prev, dup := s.addr[b.Address]; dup {
		l.p.add(l.vip, own+".address", "%s is already the address of %s", b.Address, prev)
		return
	}
	s.addr[b.Address] = own
}

// buildBackend resolves one [[vip.backend]] table.
func buildBackend(l *layer, rb *rawBackend) Backend {
	var none opt[string]
	b := Backend{Line: l.p.lines.line(l.own)}
	b.Name = l.str("name", rb.Name, none, "")
	switch {
	case l.ok("name") && !validName(b.Name):
		l.problem("name", "%q %s", b.Name, nameRule)
	case l.ok("name") && looksLikeIP(b.Name):
		l.problem("name", "%q looks like an IP address: drain, disable and enable take a backend's name or its address, so a name that is an address could pick another backend; use a name that is not an address (such as \"db1\"), or leave name out", b.Name)
	}
	b.Weight = l.integer("weight", rb.Weight, opt[int64]{}, 100, span[int64](0, 1000))
	b.Backup = l.boolean("backup", rb.Backup, opt[bool]{}, false)
	b.MaxConns = l.integer("max_conns", rb.MaxConns, opt[int64]{}, 0, span[int64](0, 10_000_000))
	b.MaxSessions = l.integer("max_sessions", rb.MaxSessions, opt[int64]{}, 0, span[int64](0, 10_000_000))
	backendTarget(l, rb, &b)
	return b
}

// parseAddrPort parses ip:port or [ipv6]:port with a non-zero port. An
// IPv4-mapped IPv6 address becomes plain IPv4.
func parseAddrPort(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	switch {
	case err != nil:
		return netip.AddrPort{}, fmt.Errorf("%q is not ip:port (such as 198.18.0.10:5432 or [2001:db8::10]:5432)", s)
	case ap.Port() == 0:
		return netip.AddrPort{}, fmt.Errorf("%q: port must not be 0", s)
	case ap.Addr().Zone() != "":
		return netip.AddrPort{}, fmt.Errorf("%q: zoned addresses are not supported", s)
	case ap.Addr().IsMulticast():
		return netip.AddrPort{}, fmt.Errorf("%q: multicast addresses are not supported", s)
	}
	a := ap.Addr().Unmap()
	switch {
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return netip.AddrPort{}, fmt.Errorf("%q: the broadcast address is not a host", s)
	case a.Is4() && a.As4()[0] == 0 && !a.IsUnspecified():
		return netip.AddrPort{}, fmt.Errorf("%q: 0.0.0.0/8 addresses are not hosts (\"this network\")", s)
	case a.IsLinkLocalUnicast() && a.Is6():
		return netip.AddrPort{}, fmt.Errorf("%q: IPv6 link-local addresses need a zone, which is not supported", s)
	}
	return netip.AddrPortFrom(a, ap.Port()), nil
}

// checkName reports key's value s unless it is a valid VIP, backend or
// route name.
func (l *layer) checkName(key, s string) {
	if !validName(s) {
		l.problem(key, "%q %s", s, nameRule)
	}
}

// nameRule says what a name may be. The admin API takes VIP and backend
// names as URL path segments (/vips/NAME/backends/NAME/drain), where "."
// and ".." are not names but steps: HTTP clients and servers resolve them
// away before the request is routed.
const nameRule = `must be 1 to 64 of a-z A-Z 0-9 _ . - and not "." or ".." (names are path segments of the admin API)`

// validName reports whether s is a valid VIP, backend or route name.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 || s == "." || s == ".." {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// looksLikeIP reports whether a name reads as an IPv4 address: four
// dot-separated decimal numbers ("198.18.1.12", also "198.018.1.12",
// which netip refuses but a reader takes for an address). IPv6 addresses
// hold ':', which no name may.
func looksLikeIP(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// isPrime reports whether n is prime (trial division; n is at most ~1e6).
func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// checkBackups refuses a VIP whose backends are all backups: nothing
// would be primary, so the backups would simply be the backends.
func checkBackups(l *layer, v *VIP) {
	if len(v.Backends) == 0 {
		return
	}
	for _, b := range v.Backends {
		if !b.Backup {
			return
		}
	}
	l.problem("backend", "every backend has backup = true: at least one must be a primary (backups take flows only while no primary is eligible)")
}
