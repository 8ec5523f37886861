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
	l.eachString(key, raw, `a network such as "198.18.0.0/15"`, func(i int, s string) {
		p, err := parsePrefix(s)
		switch {
		case err != nil:
			l.problem(key, "[%d] %q is not a network such as \"198.18.0.0/15\" or an address", i, s)
		case p != p.Masked():
			l.problem(key, "[%d] %q has host bits set (did you mean %q?)", i, s, p.Masked().String())
		default:
			out = append(out, p)
		}
	})
	return out
}

// eachString calls fn with each element of the array raw (key's value)
// that is a string; another element is a problem: it should be what.
func (l *layer) eachString(key string, raw []any, what string, fn func(i int, s string)) {
	for i, e := range raw {
		if s, ok := e.(string); ok {
			fn(i, s)
		} else {
			l.problem(key, "[%d] must be %s, not %s", i, what, tomlType(e))
		}
	}
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
