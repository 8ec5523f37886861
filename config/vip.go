// A [[vip]] table: identity, balancing and proxy settings, backends.

package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/l4lb/l4lb/l4"
)

// buildVIP resolves and checks vip[i] (own) over [defaults] (def); c
// holds the file's [global], [xdp] and [bgp], already built.
func buildVIP(p *problems, i int, own, def rawTable, c *Config) VIP {
	path := fmt.Sprintf("vip[%d]", i)
	l := newLayer(p, get[string](own, "name").val, path, "defaults")
	v := VIP{Line: p.lines.line(path)}
	resolveKeys(l, vipKeys, own, def, &v)
	v.Health = buildHealth(l.sub("health"), own.table("health"), def.table("health"), v.Protocol, sentProxyProtocol(&v), "")
	v.Backends = buildBackends(l, own.tables("backend"))
	v.Routes = buildRoutes(l, own, def, &v)
	checkScopes(l, &v)
	checkAccess(l, &v)
	checkBackups(l, &v)
	checkBackendCaps(l, &v)
	checkMaglev(l, &v)
	if v.Mode == l4.ModeXDP {
		checkXDPVIP(l, &v, c.XDP != nil)
		checkNATVIP(l, &v, c.XDP)
	}
	warnVIP(l, &v, c)
	return v
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

// buildBackends resolves and checks the backends of the VIP of l.
func buildBackends(l *layer, raws []rawTable) []Backend {
	if len(raws) == 0 {
		l.problem("backend", "at least one [[vip.backend]] is required")
		return nil
	}
	out := make([]Backend, 0, len(raws))
	seen := backendsSeen{id: map[string]string{}, addr: map[netip.AddrPort]string{}}
	for j := range raws {
		own := fmt.Sprintf("%s.backend[%d]", l.own, j)
		b := buildBackend(newLayer(l.p, l.vip, own, ""), raws[j])
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
func buildBackend(l *layer, own rawTable) Backend {
	b := Backend{Line: l.p.lines.line(l.own)}
	resolveKeys(l, backendKeys, own, nil, &b)
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
const nameRule = "must be " + nameRuleDoc + " (names are path segments of the admin API)"

// nameRuleDoc is the rule of names, for the reference.
const nameRuleDoc = `1 to 64 of a-z A-Z 0-9 _ . - and not "." or ".."`

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
