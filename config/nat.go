// The [xdp] NAT keys' value kinds and checks (forward = "nat").

package config

import (
	"net/netip"

	"github.com/l4lb/l4lb/l4"
)

// natSource is nat_source4 (v4) or nat_source6: an address of that
// family, or "" for the interface's.
func natSource(f func(*XDP) *netip.Addr, v4 bool) keyValue[XDP] {
	form, fam := `"IPV6"`, "an IPv6"
	if v4 {
		form, fam = `"IPV4"`, "an IPv4"
	}
	return keyValue[XDP]{
		resolve: func(l *layer, key string, own, _ rawTable, x *XDP) {
			s := l.str(key, get[string](own, key), opt[string]{}, "")
			if s == "" {
				return
			}
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.Is4In6() || a.Is4() != v4 {
				l.problem(key, "%q must be %s address of this balancer", s, fam)
				return
			}
			*f(x) = a
		},
		text: func(x *XDP) string { return addrText(*f(x)) },
		toml: func(x *XDP) string { return quoteTOML(addrText(*f(x))) },
		omit: func(x *XDP) bool { return !f(x).IsValid() },
		copy: func(dst, src *XDP) { *f(dst) = *f(src) },
		form: form,
	}
}

// addrText is a's text, "" for the zero Addr.
func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// checkNATPorts refuses an empty NAT port range.
func checkNATPorts(l *layer, x *XDP) {
	if x.NATPortMin > x.NATPortMax {
		l.problem("nat_port_max", "%d is below nat_port_min %d: the NAT port range would be empty", x.NATPortMax, x.NATPortMin)
	}
}

// checkNATVIP refuses a forward = "nat" VIP on a NAT source address: its
// clients' packets and its backends' replies would meet on one address.
func checkNATVIP(l *layer, v *VIP, x *XDP) {
	if v.Forward != l4.ForwardNAT || x == nil || !v.Listen.IsValid() {
		return
	}
	if a := v.Listen.Addr(); a == x.NATSource4 || a == x.NATSource6 {
		l.problem("listen", "%s is [xdp]'s NAT source address: a forward = \"nat\" VIP needs an address of its own", a)
	}
}
