// A VIP's health check: [vip.health] over [defaults.health] over built-ins.

package config

import (
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// maxPayload bounds send, expect and expect_regex, in bytes.
const maxPayload = 4096

// buildHealth resolves and checks one VIP's health table. The built-in
// check type is tcp for TCP VIPs and none (passive marks from ICMP errors
// only) for UDP VIPs: a UDP service need not listen on TCP.
// proxyProtocol is the header version the VIP sends its backends.
func buildHealth(l *layer, o, d *rawHealth, protocol l4.Protocol, proxyProtocol l4.ProxyVersion) Health {
	defType := l4.CheckTCP
	if protocol == l4.UDP {
		defType = l4.CheckNone
	}
	h := Health{
		Type:        enum(l, "type", o.Type, d.Type, defType, l4.CheckTypeNames()),
		Interval:    l.duration("interval", o.Interval, d.Interval, 2*time.Second, span(100*time.Millisecond, time.Hour)),
		Timeout:     l.duration("timeout", o.Timeout, d.Timeout, time.Second, span(time.Millisecond, time.Hour)),
		Rise:        l.integer("rise", o.Rise, d.Rise, 2, span[int64](1, 100)),
		Fall:        l.integer("fall", o.Fall, d.Fall, 3, span[int64](1, 100)),
		Port:        l.integer("port", o.Port, d.Port, 0, span[int64](0, 65535)),
		MaxFails:    l.integer("max_fails", o.MaxFails, d.MaxFails, 1, span[int64](0, 100)),
		FailTimeout: l.duration("fail_timeout", o.FailTimeout, d.FailTimeout, 10*time.Second, span(time.Second, time.Hour)),
		SlowStart:   l.duration("slow_start", o.SlowStart, d.SlowStart, 0, span(0, time.Hour)),
		OnDown:      enum(l, "on_down", o.OnDown, d.OnDown, l4.OnDownKeep, l4.OnDownNames()),
	}
	if h.Timeout > h.Interval {
		key := "timeout" // report at the one the VIP itself sets, if only one
		if !l.ownSet("timeout") && (l.ownSet("interval") || !l.has("timeout")) {
			key = "interval"
		}
		l.problem(key, "timeout %s must not exceed interval %s", fmtDuration(h.Timeout), fmtDuration(h.Interval))
	}
	if protocol == l4.UDP && h.Type.Database() {
		l.problem("type", "%s is a TCP service: a udp VIP cannot front it (use none, tcp, http or send_expect with port)", h.Type)
	}
	healthPayload(l, o, d, &h)
	healthHTTP(l, o, d, &h)
	healthDB(l, o, d, &h)
	h.SendProxy = healthSendProxy(l, o, d, &h, proxyProtocol)
	checkHealthScopes(l, &h)
	return h
}

// healthSendProxy resolves send_proxy into the header version the checks
// send. A VIP that sets it without sending the header itself is refused:
// the version would be a guess. From [defaults.health], it applies to the
// VIPs that send one.
func healthSendProxy(l *layer, o, d *rawHealth, h *Health, proxyProtocol l4.ProxyVersion) l4.ProxyVersion {
	sends := proxyProtocol != l4.ProxyOff
	on := l.boolean("send_proxy", o.SendProxy, d.SendProxy, sends && h.Port == 0)
	switch {
	case !on || h.Type == l4.CheckNone:
		return l4.ProxyOff
	case !sends:
		if l.ownSet("send_proxy") {
			l.problem("send_proxy", "the VIP sends its backends no PROXY header (proxy_protocol = \"off\"); set proxy_protocol = \"v1\" or \"v2\", which the checks then send too")
		}
		return l4.ProxyOff
	}
	return proxyProtocol
}

// groupOf returns the tables to take a group of keys from: the VIP's own
// when it sets any key of the group, else [defaults]. So a VIP's send_hex
// replaces a default send instead of clashing with it.
func groupOf(o, d *rawHealth, ownSetsAny bool) (own, def *rawHealth) {
	if ownSetsAny {
		return o, &rawHealth{}
	}
	return &rawHealth{}, d
}

// healthPayload resolves send/send_hex and expect/expect_hex/expect_regex.
func healthPayload(l *layer, o, d *rawHealth, h *Health) {
	so, sd := groupOf(o, d, o.Send.set || o.SendHex.set)
	h.Send = l.payload("send", so.Send, sd.Send, "send_hex", so.SendHex, sd.SendHex)
	eo, ed := groupOf(o, d, o.Expect.set || o.ExpectHex.set || o.ExpectRegex.set)
	h.Expect = l.payload("expect", eo.Expect, ed.Expect, "expect_hex", eo.ExpectHex, ed.ExpectHex)
	h.ExpectRegex = l.str("expect_regex", eo.ExpectRegex, ed.ExpectRegex, "")
	if l.has("expect_regex") && (l.has("expect") || l.has("expect_hex")) {
		l.problem("expect_regex", "expect, expect_hex and expect_regex are mutually exclusive")
	}
	if len(h.ExpectRegex) > maxPayload {
		l.problem("expect_regex", "%d bytes is more than %d", len(h.ExpectRegex), maxPayload)
		h.ExpectRegex = ""
	} else if _, err := regexp.Compile(h.ExpectRegex); err != nil {
		l.problem("expect_regex", "%v", err)
		h.ExpectRegex = ""
	}
	if h.Type == l4.CheckSendExpect && len(h.Send) == 0 && len(h.Expect) == 0 && h.ExpectRegex == "" && !anyFailed(l, payloadKeys...) {
		l.problem(emptyCheckKey(l), "send_expect with nothing to send and nothing to expect is only a TCP connect: set send (or send_hex), expect, expect_hex or expect_regex to something, or use type = \"tcp\"")
	}
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

// healthHTTP resolves the http check keys.
func healthHTTP(l *layer, o, d *rawHealth, h *Health) {
	h.Path = l.str("path", o.Path, d.Path, "/")
	if !strings.HasPrefix(h.Path, "/") || !isToken(h.Path) {
		l.problem("path", "%q must start with / and hold no spaces or control characters", h.Path)
	}
	h.Host = l.str("host", o.Host, d.Host, "")
	if !isToken(h.Host) {
		l.problem("host", "%q must hold no spaces or control characters", h.Host)
	}
	h.WebSocket = l.boolean("websocket", o.WebSocket, d.WebSocket, false)
	status := 200
	if h.WebSocket {
		status = 101 // Switching Protocols
	}
	h.Status = l.integer("status", o.Status, d.Status, status, span[int64](100, 599))
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

// healthDB resolves the postgres, mysql and redis check keys.
func healthDB(l *layer, o, d *rawHealth, h *Health) {
	h.User = l.str("user", o.User, d.User, "")
	h.Password = l.str("password", o.Password, d.Password, "")
	h.Database = l.str("database", o.Database, d.Database, "")
	l.noNUL("user", h.User)
	l.noNUL("password", h.Password)
	l.noNUL("database", h.Database)
	h.Role = enum(l, "role", o.Role, d.Role, l4.RoleAny, l4.DBRoleNames())
	if h.Role != l4.RoleAny && h.User == "" && (h.Type == l4.CheckPostgres || h.Type == l4.CheckMySQL) {
		l.problem("role", "role %s needs a user to log in and ask the server", h.Role)
	}
}

// noNUL reports a NUL byte in v: the database protocols send C strings.
func (l *layer) noNUL(key, v string) {
	if strings.IndexByte(v, 0) >= 0 {
		l.problem(key, "must not contain a NUL byte")
	}
}

// healthScopes lists the keys that apply only to some check types.
var healthScopes = []struct {
	key   string
	types []l4.CheckType
}{
	{"send", []l4.CheckType{l4.CheckSendExpect}},
	{"send_hex", []l4.CheckType{l4.CheckSendExpect}},
	{"expect", []l4.CheckType{l4.CheckSendExpect}},
	{"expect_hex", []l4.CheckType{l4.CheckSendExpect}},
	{"expect_regex", []l4.CheckType{l4.CheckSendExpect}},
	{"path", []l4.CheckType{l4.CheckHTTP}},
	{"host", []l4.CheckType{l4.CheckHTTP}},
	{"status", []l4.CheckType{l4.CheckHTTP}},
	{"websocket", []l4.CheckType{l4.CheckHTTP}},
	{"user", []l4.CheckType{l4.CheckPostgres, l4.CheckMySQL, l4.CheckRedis}},
	{"password", []l4.CheckType{l4.CheckPostgres, l4.CheckMySQL, l4.CheckRedis}},
	{"database", []l4.CheckType{l4.CheckPostgres, l4.CheckMySQL}},
	{"role", []l4.CheckType{l4.CheckPostgres, l4.CheckMySQL}},
	{"send_proxy", []l4.CheckType{l4.CheckTCP, l4.CheckSendExpect, l4.CheckPostgres, l4.CheckMySQL, l4.CheckRedis, l4.CheckHTTP}},
}

// typeNames joins the names of check types.
func typeNames(ts []l4.CheckType) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return strings.Join(names, " or ")
}

// checkHealthScopes reports keys the VIP sets for a check type they do not
// apply to, then clears whatever does not apply (such as an http path
// inherited from [defaults.health] by a tcp check).
func checkHealthScopes(l *layer, h *Health) {
	for _, s := range healthScopes {
		if l.ownSet(s.key) && !slices.Contains(s.types, h.Type) {
			l.problem(s.key, "applies only to health type %s, not %s", typeNames(s.types), h.Type)
		}
	}
	if h.Type != l4.CheckSendExpect {
		h.Send, h.Expect, h.ExpectRegex = nil, nil, ""
	}
	if h.Type != l4.CheckHTTP {
		h.Path, h.Host, h.Status, h.WebSocket = "", "", 0, false
	}
	if !h.Type.Database() {
		h.User, h.Password = "", ""
	}
	if h.Type != l4.CheckPostgres && h.Type != l4.CheckMySQL {
		h.Database, h.Role = "", l4.RoleAny
	}
}
