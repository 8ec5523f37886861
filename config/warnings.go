// Warnings: what a file may say but probably does not mean.

package config

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Each warning is declared once: a VIP's in vipWarnings, the file's in
// fileWarnings, and those that depend on the host in hostWarnings
// (host.go). Parse records the first two and CheckHost the last, and both
// `l4lb check` and `l4lb run` (at start and on every reload) get their
// warnings from there, so they can never disagree. A warning names the
// numbers that make it one and says what to do instead; a file that
// warns is still valid.

// Thresholds past which a setting is warned about, not refused.
const (
	// slowDetection: a dead backend noticed later than this keeps taking
	// new connections that long (the default is 3 x 2s).
	slowDetection = 10 * time.Minute
	// longClientWait: a client that waits longer than this for a backend
	// has usually given up (TCP clients, browsers and drivers time out in
	// seconds to a couple of minutes).
	longClientWait = 5 * time.Minute
)

// vipWarner reports a VIP's warnings at its keys: at the key's line, or
// (atLine) at another key's line.
type vipWarner struct{ l *layer }

func (w vipWarner) at(key, format string, args ...any) {
	w.l.p.warn(w.l.vip, w.l.at(key), format, args...)
}

func (w vipWarner) atLine(key, lineKey, format string, args ...any) {
	w.l.p.warnAt(w.l.p.lines.line(w.l.at(lineKey)), w.l.vip, w.l.at(key), format, args...)
}

// vipWarnings are the warnings about one VIP; c holds [global], [xdp]
// and [bgp], already built.
var vipWarnings = []func(w vipWarner, v *VIP, c *Config){
	warnZeroWeights,
	warnHiddenConnLog,
	warnUDPProbePort,
	warnProxyTrust,
	warnServerFirst,
	warnRefusesAll,
	warnSlowDetection,
	warnLongClientWait,
	warnIdleBelowKeepalive,
}

// warnVIP records the warnings about v.
func warnVIP(l *layer, v *VIP, c *Config) {
	for _, warn := range vipWarnings {
		warn(vipWarner{l}, v, c)
	}
}

func warnZeroWeights(w vipWarner, v *VIP, _ *Config) {
	for _, b := range v.Backends {
		if b.Weight != 0 {
			return
		}
	}
	if len(v.Backends) > 0 {
		w.atLine("backend", "backend[0]", "every backend has weight 0: no backend takes new flows, so every new client is refused")
	}
}

func warnHiddenConnLog(w vipWarner, v *VIP, c *Config) {
	if level := c.Global.LogLevel; v.LogConnections && (level == l4.LogWarn || level == l4.LogError) {
		w.at("log_connections", "connection lines are logged at level info, which log_level = %q hides", level)
	}
}

func warnUDPProbePort(w vipWarner, v *VIP, _ *Config) {
	if v.Protocol == l4.UDP && v.Health.Port == 0 && (v.Health.Type == l4.CheckHTTP || v.Health.Type == l4.CheckSendExpect || v.Health.Type == l4.CheckTLS) {
		w.at("health.type", "%s probes TCP port %d of each backend of this udp VIP: set health.port if the check listens elsewhere",
			v.Health.Type, v.Listen.Port())
	}
}

// warnProxyTrust: whoever may send a PROXY header chooses the client
// address that allow/deny, the per-client limits and source hashing see.
// Trusting every source, or a network that also holds allowed clients,
// lets a client claim any address.
func warnProxyTrust(w vipWarner, v *VIP, _ *Config) {
	for _, from := range v.AcceptProxyProtocolFrom {
		if from.Bits() == 0 {
			w.at("accept_proxy_protocol_from", "%s trusts every source to send a PROXY header: any client can claim any address, past allow/deny, "+
				"the per-client limits and source hashing; list only the balancers in front", from)
			continue
		}
		for _, a := range v.Allow {
			if a.Bits() > 0 && a.Overlaps(from) {
				w.at("accept_proxy_protocol_from", "%s overlaps %s, a client network in allow: a client there may send a PROXY header and claim any address, "+
					"past allow/deny and the per-client limits; list only the balancers in front, never client networks", from, a)
				break
			}
		}
	}
}

// warnServerFirst: with a protocol whose server speaks first (MySQL's
// greeting, a banner that send_expect waits for), the client sends
// nothing until its backend greets it, so defer_accept holds each
// connection back and first_byte_timeout cuts every one.
func warnServerFirst(w vipWarner, v *VIP, _ *Config) {
	what := serverFirst(&v.Health)
	if what == "" {
		return
	}
	if v.DeferAccept {
		w.at("defer_accept", "with %s the server speaks first: clients send nothing until their backend greets them, "+
			"so every connection waits about a second (TCP_DEFER_ACCEPT) before l4lb even dials a backend; set defer_accept = false", what)
	}
	if v.FirstByteTimeout > 0 {
		w.at("first_byte_timeout", "with %s the server speaks first: clients send nothing until their backend greets them, "+
			"and no backend is dialed before their first byte, so every connection is closed after %s; set first_byte_timeout = \"0\"", what, fmtDuration(v.FirstByteTimeout))
	}
}

// serverFirst describes h when its service speaks first, else "".
func serverFirst(h *Health) string {
	switch {
	case h.Type == l4.CheckMySQL:
		return "health type mysql (the server's greeting)"
	case h.Type == l4.CheckSendExpect && len(h.Send) == 0:
		return "a send_expect check that sends nothing and expects a banner"
	}
	return ""
}

// warnRefusesAll: access lists under which no client of the VIP's
// address family is allowed.
func warnRefusesAll(w vipWarner, v *VIP, _ *Config) {
	if !v.Listen.IsValid() || len(v.Allow)+len(v.Deny) == 0 {
		return
	}
	fam := familyName(v.Listen.Addr())
	allow, deny := sameFamily(v.Allow, v.Listen.Addr()), sameFamily(v.Deny, v.Listen.Addr())
	switch {
	case len(v.Allow) == 0 && covered(everyAddress(v.Listen.Addr()), deny):
		w.at("deny", "deny covers every %s address and allow lists no exception: every client of this VIP is refused", fam)
	case len(v.Allow) > 0 && len(allow) == 0:
		w.at("allow", "allow lists no %s network, and a client in neither list is refused when allow is set: every client of this %s VIP is refused", fam, fam)
	case len(allow) > 0 && allCovered(allow, deny):
		w.at("allow", "every network in allow is covered by more specific networks in deny: every client of this VIP is refused")
	}
}

// allCovered reports whether each network in allow is covered by the
// deny networks more specific than it (the most specific network
// decides, so those are the ones that refuse its clients).
func allCovered(allow, deny []netip.Prefix) bool {
	for _, a := range allow {
		var inside []netip.Prefix
		for _, d := range deny {
			if d.Bits() > a.Bits() && a.Contains(d.Addr()) {
				inside = append(inside, d)
			}
		}
		if !covered(a, inside) {
			return false
		}
	}
	return true
}

// covered reports whether the networks in by cover all of p, splitting p
// in halves where only parts of it are covered.
func covered(p netip.Prefix, by []netip.Prefix) bool {
	var inside []netip.Prefix
	for _, q := range by {
		switch {
		case q.Bits() <= p.Bits() && q.Contains(p.Addr()):
			return true
		case q.Bits() > p.Bits() && p.Contains(q.Addr()):
			inside = append(inside, q)
		}
	}
	if len(inside) == 0 || p.Bits() == p.Addr().BitLen() {
		return false
	}
	lo, hi := halves(p)
	return covered(lo, inside) && covered(hi, inside)
}

// halves splits p into its two networks one bit longer.
func halves(p netip.Prefix) (lo, hi netip.Prefix) {
	a := p.Addr().As16()
	off := 0
	if p.Addr().Is4() {
		off = 96
	}
	bit := off + p.Bits()
	b := a
	b[bit/8] |= 0x80 >> (bit % 8)
	mk := func(x [16]byte) netip.Prefix {
		addr := netip.AddrFrom16(x)
		if p.Addr().Is4() {
			addr = addr.Unmap()
		}
		return netip.PrefixFrom(addr, p.Bits()+1)
	}
	return mk(a), mk(b)
}

// everyAddress is the /0 of a's family.
func everyAddress(a netip.Addr) netip.Prefix {
	if a.Is4() {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
}

// sameFamily returns the networks of a's family (l4lb's sockets are
// IPV6_V6ONLY: an IPv4 client never reaches an IPv6 VIP).
func sameFamily(ps []netip.Prefix, a netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() == a.Is4() {
			out = append(out, p)
		}
	}
	return out
}

func familyName(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// warnSlowDetection: fall checks interval apart before a dead backend is
// marked down.
func warnSlowDetection(w vipWarner, v *VIP, _ *Config) {
	h := &v.Health
	if h.Type == l4.CheckNone {
		return
	}
	if d := time.Duration(h.Fall) * h.Interval; d > slowDetection {
		w.at("health.interval", "a dead backend is marked down only after fall %d x interval %s = %s of failed checks, and takes new connections until then; "+
			"seconds are usual (the default is 3 x 2s)", h.Fall, fmtDuration(h.Interval), fmtDuration(d))
	}
}

// warnLongClientWait: how long a new TCP client can wait before it is
// served or reset: in the queue when every backend is at its max_conns,
// then a connect timeout for each backend tried.
func warnLongClientWait(w vipWarner, v *VIP, _ *Config) {
	if !isTCPProxy(v) {
		return
	}
	tries := v.Retries + 1
	connect := time.Duration(tries) * v.ConnectTimeout
	queue, parts := time.Duration(0), ""
	if hasBackendCaps(v) {
		queue, parts = v.QueueTimeout, fmt.Sprintf("queue_timeout %s + ", fmtDuration(v.QueueTimeout))
	}
	if total := queue + connect; total > longClientWait {
		key := "connect_timeout"
		if queue > connect {
			key = "queue_timeout"
		}
		w.at(key, "a client can wait %s before it is served or reset: %sconnect_timeout %s x %d tries (retries = %d); "+
			"clients give up long before (keep it within a few minutes)", fmtDuration(total), parts, fmtDuration(v.ConnectTimeout), tries, v.Retries)
	}
}

// hasBackendCaps reports whether a backend of v has max_conns or
// max_conn_rate (only then do new connections queue).
func hasBackendCaps(v *VIP) bool {
	for _, b := range v.Backends {
		if b.MaxConns > 0 || b.MaxConnRate > 0 {
			return true
		}
	}
	return false
}

// warnIdleBelowKeepalive: the idle timeout closes a quiet connection
// before TCP keepalive sends its first probe, so keepalive never runs.
func warnIdleBelowKeepalive(w vipWarner, v *VIP, _ *Config) {
	if isTCPProxy(v) && v.KeepAlive > 0 && v.IdleTimeout <= v.KeepAlive {
		w.at("idle_timeout", "idle_timeout %s closes a quiet connection before its first keepalive probe at %s (keepalive): keepalive never runs; "+
			"raise idle_timeout above it or lower keepalive", fmtDuration(v.IdleTimeout), fmtDuration(v.KeepAlive))
	}
}

// fileWarnings are the warnings about the file as a whole.
var fileWarnings = []func(p *problems, c *Config){
	warnBGPPeerIsVIP,
}

// warnFile records the warnings about c as a whole.
func warnFile(p *problems, c *Config) {
	for _, warn := range fileWarnings {
		warn(p, c)
	}
}

// warnBGPPeerIsVIP: a router's address that is also a VIP's is served by
// l4lb: the BGP session would go to this host, not to the router.
func warnBGPPeerIsVIP(p *problems, c *Config) {
	if c.BGP == nil {
		return
	}
	for i, peer := range c.BGP.Peers {
		for j := range c.VIPs {
			if v := &c.VIPs[j]; v.Listen.Addr() == peer.Address {
				p.warn("", fmt.Sprintf("bgp.peer[%d].address", i), "%s is also the address of vip %q (line %s): a router's address cannot be a VIP's, "+
					"or the BGP session and the announced route lead back to this host", peer.Address, v.Name, lineString(v.Line))
				break
			}
		}
	}
}
