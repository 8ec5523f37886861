// A VIP's health check: [vip.health] over [defaults.health] over built-ins.

package config

import (
	"encoding/hex"
	"strings"

	"github.com/l4lb/l4lb/l4"
)

// maxPayload bounds send, expect and expect_regex, in bytes.
const maxPayload = 4096

// buildHealth resolves and checks one VIP's health table (own) over
// [defaults.health] (def). The built-in check type is tcp for TCP VIPs
// and none (passive marks from ICMP errors only) for UDP VIPs: a UDP
// service need not listen on TCP. proxyProtocol is the header version
// the VIP sends its backends; sni is the server name a tls check sends
// unless the table sets one ("" for a VIP, a route's first exact name).
func buildHealth(l *layer, own, def rawTable, protocol l4.Protocol, proxyProtocol l4.ProxyVersion, sni string) Health {
	h := Health{Type: l4.CheckTCP, SendProxy: proxyProtocol, TLSServerName: sni}
	if protocol == l4.UDP {
		h.Type = l4.CheckNone
	}
	resolveKeys(l, healthKeys, own, def, &h)
	if h.Timeout > h.Interval {
		key := "timeout" // report at the one the VIP itself sets, if only one
		if !l.ownSet("timeout") && (l.ownSet("interval") || !l.has("timeout")) {
			key = "interval"
		}
		l.problem(key, "timeout %s must not exceed interval %s", fmtDuration(h.Timeout), fmtDuration(h.Interval))
	}
	if protocol == l4.UDP && h.Type.Database() {
		l.problem("type", "%s is a TCP service: a udp VIP cannot front it (use none, udp, dns, or tcp, http, send_expect or tls with port)", h.Type)
	}
	checkHealthScopes(l, &h)
	return h
}

// groupOf returns the tables to take a group of keys from: the check's
// own when it sets any key of the group, else [defaults.health]. So a
// VIP's send_hex replaces a default send instead of clashing with it.
func groupOf(own, def rawTable, keys ...string) (rawTable, rawTable) {
	for _, k := range keys {
		if own.has(k) {
			return own, nil
		}
	}
	return nil, def
}

// payloadKeys are the send_expect keys.
var payloadKeys = []string{"send", "send_hex", "expect", "expect_hex", "expect_regex"}

// emptyCheckKey is where an empty send_expect check is reported: the
// first payload key the file sets (empty), else the type.
func emptyCheckKey(l *layer) string {
	for _, k := range payloadKeys {
		if l.has(k) {
			return k
		}
	}
	return "type"
}

// anyFailed reports whether a problem was reported for one of keys.
func anyFailed(l *layer, keys ...string) bool {
	for _, k := range keys {
		if l.failed[k] {
			return true
		}
	}
	return false
}

// payload resolves a pair of keys giving the same bytes as text or as hex
// (spaces allowed: "00 00 00 08").
func (l *layer) payload(key string, own, def opt[string], hexKey string, hexOwn, hexDef opt[string]) []byte {
	text := l.str(key, own, def, "")
	hx := l.str(hexKey, hexOwn, hexDef, "")
	var b []byte
	switch {
	case l.has(key) && l.has(hexKey):
		l.problem(hexKey, "%s and %s are mutually exclusive", key, hexKey)
		return nil
	case l.ok(hexKey):
		var err error
		if b, err = hex.DecodeString(strings.Join(strings.Fields(hx), "")); err != nil {
			l.problem(hexKey, "%q is not hex bytes", hx)
			return nil
		}
	case l.ok(key):
		b = []byte(text)
	}
	if len(b) > maxPayload {
		l.problem(l.pickKey(key, hexKey), "%d bytes is more than %d", len(b), maxPayload)
		return nil
	}
	return b
}

// pickKey returns whichever of the two keys is set.
func (l *layer) pickKey(a, b string) string {
	if l.has(a) {
		return a
	}
	return b
}

// isToken reports whether s is printable ASCII without spaces.
func isToken(s string) bool {
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// checkHealthScopes reports keys the table sets for a check type they do
// not apply to, then clears whatever does not apply (such as an http path
// inherited from [defaults.health] by a tcp check).
func checkHealthScopes(l *layer, h *Health) {
	var zero Health
	for i := range healthKeys {
		k := &healthKeys[i]
		if k.applies(h) {
			continue
		}
		switch {
		case !l.ownSet(k.name):
		case k.refused != "":
			l.problem(k.name, "%s", k.refused)
		default:
			l.problem(k.name, "applies only to %s, not %s", k.scope, h.Type)
		}
		k.val.copy(h, &zero)
	}
}
