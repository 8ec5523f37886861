// Lists of networks (accept_proxy_protocol_from): parsed, checked and
// normalised.

package config

import (
	"errors"
	"net/netip"
	"strings"
)

// prefixes resolves an array of networks ("198.18.0.0/15", "2001:db8::/32",
// or a bare address for one host). An IPv4-mapped IPv6 network becomes
// IPv4; a network with host bits set is refused (it is usually a typo).
func (l *layer) prefixes(key string, own, def opt[[]any]) []netip.Prefix {
	raw := value(l, key, own, def, nil, "an array of networks")
	var out []netip.Prefix
	for i, e := range raw {
		s, ok := e.(string)
		if !ok {
			l.problem(key, "[%d] must be a network such as \"198.18.0.0/15\", not %s", i, tomlType(e))
			continue
		}
		p, err := parsePrefix(s)
		if err != nil {
			l.problem(key, "[%d] %q is not a network such as \"198.18.0.0/15\" or an address", i, s)
			continue
		}
		if p != p.Masked() {
			l.problem(key, "[%d] %q has host bits set (did you mean %q?)", i, s, p.Masked().String())
			continue
		}
		out = append(out, p)
	}
	return out
}

// parsePrefix parses a network or a bare address (a /32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("zoned address")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, err
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}

// prefixList writes networks as a TOML array, each quoted by quote.
func prefixList(ps []netip.Prefix, quote func(string) string) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = quote(p.String())
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// checkAccess refuses a network that is both allowed and denied: which one
// wins would be a guess.
func checkAccess(l *layer, v *VIP) {
	allowed := make(map[netip.Prefix]bool, len(v.Allow))
	for _, p := range v.Allow {
		allowed[p] = true
	}
	for i, p := range v.Deny {
		if allowed[p] {
			l.problem("deny", "[%d] %q is in allow too: a network is either allowed or denied (a more specific network overrides a wider one)", i, p.String())
		}
	}
}
