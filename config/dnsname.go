// DNS-named backends: address = "name:port" and srv = "_svc._proto.name",
// and the [global] keys that say how the names are looked up. Load only
// checks their spelling: it never resolves, so `l4lb check` passes
// without DNS.

package config

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Built-in bounds of a name's re-resolution interval: the record's TTL,
// clamped. The floor keeps a TTL of 0 (Consul, Kubernetes headless
// services) from querying the resolver in a loop; the ceiling is HAProxy's
// `hold valid` spirit at minutes, not hours, so a moved backend is found
// even behind a long TTL.
const (
	defaultResolveMin = 5 * time.Second
	defaultResolveMax = 5 * time.Minute
)

// IsNamed reports whether b stands for the addresses of a DNS name (a
// template the reconciler expands) rather than one address.
func (b Backend) IsNamed() bool { return b.Host != "" || b.SRV != "" }

// Lookup is what a named backend looks up, as the file spells it:
// "name:port" or the SRV name; "" for an address.
func (b Backend) Lookup() string {
	switch {
	case b.SRV != "":
		return b.SRV
	case b.Host != "":
		return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	return ""
}

// parseResolver parses ip or ip:port (port 53 when absent).
func parseResolver(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.AddrPortFrom(a.Unmap(), 53), nil
	}
	ap, err := parseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not ip or ip:port (such as 198.18.0.53 or [2001:db8::53]:53)", s)
	}
	return ap, nil
}

// backendTarget resolves address or srv of a backend: exactly one of them.
func backendTarget(l *layer, own rawTable, b *Backend) {
	var none opt[string]
	addr := l.str("address", get[string](own, "address"), none, "")
	srv := l.str("srv", get[string](own, "srv"), none, "")
	switch {
	case l.has("address") && l.has("srv"):
		l.problem("srv", "a backend has address or srv, not both")
	case l.has("srv"):
		if l.ok("srv") {
			if err := checkSRVName(srv); err != nil {
				l.problem("srv", "%v", err)
			} else {
				b.SRV = strings.ToLower(strings.TrimSuffix(srv, "."))
			}
		}
	case !l.has("address"):
		l.problem("address", "is required (ip:port or name:port), or srv")
	case l.ok("address"):
		parseBackendAddress(l, addr, b)
	}
}

// parseBackendAddress parses ip:port, or name:port for a named backend.
func parseBackendAddress(l *layer, s string, b *Backend) {
	if host, port, ok := hostPort(s); ok {
		b.Host, b.Port = host, port
		return
	}
	ap, err := parseAddrPort(s)
	switch {
	case err != nil:
		l.problem("address", "%v (or name:port, such as pg-a.db.internal:5432)", err)
	case ap.Addr().IsUnspecified():
		l.problem("address", "%s is not a backend address", ap.Addr())
	default:
		b.Address = ap
	}
}

// hostPort splits name:port where name is a DNS host name (not an IP
// address) and port is 1..65535.
func hostPort(s string) (string, uint16, bool) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || !validHostName(host) {
		return "", 0, false
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, false
	}
	return strings.ToLower(strings.TrimSuffix(host, ".")), uint16(n), true
}

// validHostName reports whether s is a DNS host name (RFC 1123 labels,
// a trailing dot allowed) that is not a mistyped IPv4 address: its last
// label is not all digits.
func validHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, lb := range labels {
		if !validLabel(lb, false) {
			return false
		}
	}
	_, err := strconv.Atoi(labels[len(labels)-1])
	return err != nil
}

// validLabel checks one DNS label: 1..63 of a-z A-Z 0-9 -, not starting or
// ending with -; underscore allowed where SRV names need it.
func validLabel(lb string, underscore bool) bool {
	if len(lb) == 0 || len(lb) > 63 || lb[0] == '-' || lb[len(lb)-1] == '-' {
		return false
	}
	for _, c := range []byte(lb) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || underscore && c == '_'
		if !ok {
			return false
		}
	}
	return true
}

// checkSRVName checks an RFC 2782 name: _service._proto.domain.
func checkSRVName(s string) error {
	labels := strings.Split(strings.TrimSuffix(s, "."), ".")
	bad := fmt.Errorf("%q is not an SRV name _service._proto.domain (such as _postgresql._tcp.db.internal)", s)
	if len(labels) < 3 || len(s) > 254 || !strings.HasPrefix(labels[0], "_") || !strings.HasPrefix(labels[1], "_") {
		return bad
	}
	for _, lb := range labels {
		if !validLabel(lb, true) {
			return bad
		}
	}
	return nil
}

// addressText is a backend's address key as the file spells it: ip:port,
// name:port, or "" for an SRV backend.
func addressText(b Backend) string {
	if b.Host != "" {
		return b.Lookup()
	}
	if b.Address.IsValid() {
		return b.Address.String()
	}
	return ""
}

// addrList writes addresses as a TOML array of strings.
func addrList(as []netip.AddrPort) string {
	q := make([]string, len(as))
	for i, a := range as {
		q[i] = strconv.Quote(a.String())
	}
	return "[" + strings.Join(q, ", ") + "]"
}
