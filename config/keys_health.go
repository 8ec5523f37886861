// The keys of a health check table ([vip.health], [vip.route.health],
// [defaults.health]): one row each.

package config

import (
	"encoding/hex"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// healthKeys are the keys of a health check table, in the order Format
// writes them. buildHealth fills Type and SendProxy with what they
// default to (by the VIP's protocol and proxy_protocol) before resolving.
var healthKeys = append([]key[Health]{
	{name: "type", val: enumBy(func(h *Health) *l4.CheckType { return &h.Type }, func(h *Health) l4.CheckType { return h.Type }, l4.CheckTypeNames()),
		effect: EffectNow, note: "every backend's health starts again at unknown (eligible) until its first probe",
		def: `"tcp" (udp VIPs: "none")`,
		doc: `The check: none, passive marks only (proxy connect failures, ICMP port unreachable); tcp, the handshake; send_expect, bytes sent and a reply expected; postgres, mysql, redis, the protocol's handshake or a login; http, a GET (or a WebSocket upgrade); udp, a datagram sent and a reply datagram expected; dns, a DNS query over UDP answered with its ID and NOERROR; tls, a TLS handshake (ClientHello sent, ServerHello and the rest of the handshake expected).`},
	{name: "interval", val: durationOf(func(h *Health) *time.Duration { return &h.Interval }, 2*time.Second, span(100*time.Millisecond, time.Hour)),
		effect: EffectNow, note: probesRestart,
		doc: `Time between checks of a backend (jittered; probes start at random points of it).`},
	{name: "timeout", val: durationOf(func(h *Health) *time.Duration { return &h.Timeout }, time.Second, span(time.Millisecond, time.Hour)),
		effect: EffectNow, note: probesRestart, rule: "1ms..1h, at most interval",
		doc: `A check that has not passed within this long fails.`},
	{name: "rise", val: intOf(func(h *Health) *int { return &h.Rise }, 2, span[int64](1, 100)),
		effect: EffectNow, note: probesRestart,
		doc: `Passed checks in a row that mark a backend up.`},
	{name: "fall", val: intOf(func(h *Health) *int { return &h.Fall }, 3, span[int64](1, 100)),
		effect: EffectNow, note: probesRestart,
		doc: `Failed checks in a row that mark a backend down.`},
	{name: "port", val: intOf(func(h *Health) *int { return &h.Port }, 0, span[int64](0, 65535)),
		effect: EffectNow, note: probesRestart,
		doc: `The port checked instead of the backend's own; 0 = the backend's.`},
	{name: "max_fails", val: intOf(func(h *Health) *int { return &h.MaxFails }, 1, span[int64](0, 100)),
		effect: EffectNow, note: probesRestart,
		doc: `Passive marks: this many connect failures the proxy sees within fail_timeout mark the backend down at once (nginx max_fails); 0 = off.`},
	{name: "fail_timeout", val: durationOf(func(h *Health) *time.Duration { return &h.FailTimeout }, 10*time.Second, span(time.Second, time.Hour)),
		effect: EffectNow, note: probesRestart,
		doc: `The window of max_fails.`},
	{name: "slow_start", val: durationOf(func(h *Health) *time.Duration { return &h.SlowStart }, 0, span(0, time.Hour)),
		effect: EffectNow, note: "ramps in progress too",
		doc: `A backend that comes back up ramps its weight from 0 over this long; 0 = off.`},
	{name: "on_down", val: enumOf(func(h *Health) *l4.OnDown { return &h.OnDown }, l4.OnDownKeep, l4.OnDownNames()),
		effect: EffectNow, note: "for backends that go down from now on",
		doc: `What happens to a backend's established connections when its check marks it down: keep, they continue; reset, they are reset; graceful, they are closed (FIN both ways) at the next boundary of the VIP's app_protocol (an idle session, a WebSocket Close frame; within 10 s or idle_timeout, then closed anyway), at once on a VIP without one.`},
	// The outlier cap and panic mode (issue 28).
	{name: "max_ejected", val: intOf(func(h *Health) *int { return &h.MaxEjected }, 50, span[int64](0, 100)),
		effect: EffectNow, note: "backends marked from now on; the next rebuild of the VIP's table re-counts",
		doc: `Passive marks (max_fails) take at most this percent of the VIP's backends out at once, rounded down but at least one (Envoy's max_ejection_percent): a mark beyond it is logged and the backend stays in, until an active check fails it or an earlier mark ends; 100 = no cap; 0 = passive marks never take a backend out. With the default 50, passive marks alone never take out more than half of a pool of two or more.`},
	{name: "panic_mode", val: boolOf(func(h *Health) *bool { return &h.PanicMode }, false),
		effect: EffectNow, note: "the next rebuild of the VIP's table",
		doc: `When health (checks or passive marks) would leave the VIP no backend for new flows, the backends down by health take them anyway, balanced as usual (Envoy's panic routing at 0% healthy), logged as an error and shown in status (serving "panic") until one is up again, so that a broken check cannot black-hole the service. Off by default: down means down (HAProxy), a role check's down replica must not take writes, and failover_hold can wait for a backend instead. Backends an operator disabled or drained, or with weight 0, stay out.`},
	{name: "send", scope: sendExpect, val: healthSend(),
		effect: EffectNow, note: probesRestart,
		doc: `send_expect, udp: the bytes sent, as text (send and send_hex are one setting: at most one of them, at most 4096 bytes); udp: the datagram, required.`},
	{name: "send_hex", scope: sendExpect, val: hexOf(func(h *Health) []byte { return h.Send }), reload: "as send",
		doc: `send_expect, udp: the bytes sent, as hex ("50 49 4e 47", spaces allowed).`},
	{name: "expect", scope: sendExpect, val: healthExpect(),
		effect: EffectNow, note: probesRestart,
		doc: `send_expect, udp: the reply must start with this text (expect, expect_hex and expect_regex are one setting: at most one of them). udp without one: any reply datagram passes.`},
	{name: "expect_hex", scope: sendExpect, val: hexOf(expectBytes), reload: "as expect",
		doc: `send_expect, udp: the reply must start with these bytes, as hex.`},
	{name: "expect_regex", scope: sendExpect, val: healthExpectRegex(), check: checkNotEmptyCheck,
		effect: EffectNow, note: probesRestart,
		doc: `send_expect, udp: the reply must match this regular expression (RE2 syntax). A send_expect check needs send, an expect or both.`},
	{name: "path", scope: httpCheck, val: healthToken(func(h *Health) *string { return &h.Path }, "/", "%q must start with / and hold no spaces or control characters"),
		effect: EffectNow, note: probesRestart,
		doc: `http: the path requested; starts with /.`},
	{name: "host", scope: httpCheck,
		val:    healthToken(func(h *Health) *string { return &h.Host }, "", "%q must hold no spaces or control characters").omitIf(func(h *Health) bool { return h.Host == "" }),
		effect: EffectNow, note: probesRestart, def: "the backend's address",
		doc: `http: the Host header.`},
	{name: "status", scope: httpCheck,
		val:    healthStatus().resolvedWithin(),
		effect: EffectNow, note: probesRestart, def: `200; 101 with websocket = true`,
		doc: `http: the status the reply must have.`},
	{name: "websocket", scope: httpCheck, val: healthWebSocket(),
		effect: EffectNow, note: probesRestart,
		doc: `http: send a WebSocket upgrade request instead of a GET, and expect 101 Switching Protocols with a valid Sec-WebSocket-Accept.`},
	{name: "user", scope: database, val: healthCString(func(h *Health) *string { return &h.User }),
		effect: EffectNow, note: probesRestart,
		doc: `postgres, mysql: log in as this user (and check role); redis: the ACL user of AUTH.`},
	{name: "password", scope: database, val: healthCString(func(h *Health) *string { return &h.Password }),
		effect: EffectNow, note: probesRestart,
		doc: "The password of user (redis: AUTH with it, even without user). `l4lb status --show-config` shows it as " + Redacted + "."},
	{name: "database", scope: postgresMySQL, val: healthCString(func(h *Health) *string { return &h.Database }),
		effect: EffectNow, note: probesRestart,
		doc: `postgres, mysql: the database to log in to.`},
	{name: "role", scope: postgresMySQL, val: enumOf(func(h *Health) *l4.DBRole { return &h.Role }, l4.RoleAny, l4.DBRoleNames()),
		check: checkRoleUser, effect: EffectNow, note: probesRestart,
		doc: `postgres, mysql: the replication role a backend must have to be up: any; primary, accepting writes; replica, read-only. Other than any needs user.`},
	{name: "max_lag", scope: replicaCheck, refused: replicaOnly, val: durationOf(func(h *Health) *time.Duration { return &h.MaxLag }, 0, orOff(100*time.Millisecond, 24*time.Hour)),
		effect: EffectNow, note: probesRestart,
		doc: `postgres, mysql with role = "replica": a replica whose replication lag is above this, or cannot be told (PostgreSQL: no WAL receiver streaming; MySQL: Seconds_Behind_Master NULL or the SQL thread stopped), fails its check: down after fall checks, back after rise; 0 = off (the lag is still read and shown).`},
	{name: "lag_weight", scope: replicaCheck, refused: replicaOnly, val: durationOf(func(h *Health) *time.Duration { return &h.LagWeight }, 0, orOff(100*time.Millisecond, 24*time.Hour)),
		check: checkLagWeight, effect: EffectNow, note: "weights follow at once",
		doc: `postgres, mysql with role = "replica": above this lag a replica's weight falls linearly, to a tenth of it (at least 1) at max_lag, composed with slow_start; below max_lag, which it needs; 0 = off.`},
	{name: "send_proxy", scope: tcpChecks, val: healthSendProxy(),
		effect: EffectNow, note: probesRestart, def: `true when the VIP sends a PROXY header (proxy_protocol) and port = 0, else false`,
		doc: `Every check connection starts with the VIP's PROXY header (HAProxy's check-send-proxy): a backend that requires it for traffic requires it for checks too. Set false for a check port that takes no header.`},
}, probeKeys...) // keys_probe.go: the udp, dns, tls and agent keys

const probesRestart = "probes restart with it; health states are kept"

// healthScope is the check types some health keys apply to.
type healthScope []l4.CheckType

func (s healthScope) applies(h *Health) bool { return slices.Contains(s, h.Type) }
func (s healthScope) String() string         { return "health type " + typeNames(s) }

// The scopes of health keys.
var (
	sendExpect    = healthScope{l4.CheckSendExpect, l4.CheckUDP}
	httpCheck     = healthScope{l4.CheckHTTP}
	database      = healthScope{l4.CheckPostgres, l4.CheckMySQL, l4.CheckRedis}
	postgresMySQL = healthScope{l4.CheckPostgres, l4.CheckMySQL}
	tcpChecks     = healthScope{l4.CheckTCP, l4.CheckSendExpect, l4.CheckPostgres, l4.CheckMySQL, l4.CheckRedis, l4.CheckHTTP, l4.CheckTLS}
)

// replicaScope is the checks that read a replica's lag: postgres and
// mysql with role replica.
type replicaScope struct{}

func (replicaScope) applies(h *Health) bool {
	return h.Role == l4.RoleReplica && postgresMySQL.applies(h)
}
func (replicaScope) String() string { return `health type postgres or mysql with role = "replica"` }

var replicaCheck replicaScope

// replicaOnly is the problem of a lag key set elsewhere.
const replicaOnly = `applies only to postgres and mysql checks with role = "replica" (the lag of a server that replicates)`

// checkLagWeight: the soft bound is below the hard one.
func checkLagWeight(l *layer, h *Health) {
	if h.LagWeight == 0 || !replicaCheck.applies(h) || l.failed["max_lag"] {
		return
	}
	switch {
	case h.MaxLag == 0:
		l.problem("lag_weight", "needs max_lag: weights scale down between lag_weight and max_lag")
	case h.LagWeight >= h.MaxLag:
		l.problem("lag_weight", "%s must be below max_lag %s: weights scale down between the two", fmtDuration(h.LagWeight), fmtDuration(h.MaxLag))
	}
}

// typeNames joins the names of check types.
func typeNames(ts []l4.CheckType) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return strings.Join(names, " or ")
}

// healthSend resolves send and send_hex, one setting: both from the
// table itself when it sets either, else both from [defaults.health].
func healthSend() keyValue[Health] {
	return keyValue[Health]{
		resolve: func(l *layer, _ string, own, def rawTable, h *Health) {
			o, d := groupOf(own, def, "send", "send_hex")
			h.Send = l.payload("send", get[string](o, "send"), get[string](d, "send"), "send_hex", get[string](o, "send_hex"), get[string](d, "send_hex"))
		},
		text: func(h *Health) string { return quoteBytes(h.Send) },
		toml: func(h *Health) string { return quoteTOML(string(h.Send)) },
		omit: never[Health], // Format writes the bytes as send_hex
		copy: func(dst, src *Health) { dst.Send = src.Send },
		form: `"TEXT"`,
	}
}

// healthExpect resolves expect and expect_hex; expect_regex is of their
// group (healthExpectRegex).
func healthExpect() keyValue[Health] {
	return keyValue[Health]{
		resolve: func(l *layer, _ string, own, def rawTable, h *Health) {
			o, d := groupOf(own, def, "expect", "expect_hex", "expect_regex")
			h.Expect = l.payload("expect", get[string](o, "expect"), get[string](d, "expect"), "expect_hex", get[string](o, "expect_hex"), get[string](d, "expect_hex"))
		},
		text: func(h *Health) string { return quoteBytes(h.Expect) },
		toml: func(h *Health) string { return quoteTOML(string(h.Expect)) },
		omit: never[Health], // as expect_hex
		copy: func(dst, src *Health) { dst.Expect = src.Expect },
		form: `"TEXT"`,
	}
}

// healthExpectRegex resolves expect_regex, exclusive of the other two
// expect keys.
func healthExpectRegex() keyValue[Health] {
	v := stringOf(func(h *Health) *string { return &h.ExpectRegex }, "", strconv.Quote).as(`"RE2 EXPRESSION"`).omitIf(func(h *Health) bool { return h.ExpectRegex == "" })
	v.resolve = func(l *layer, key string, own, def rawTable, h *Health) {
		o, d := groupOf(own, def, "expect", "expect_hex", "expect_regex")
		h.ExpectRegex = l.str(key, get[string](o, key), get[string](d, key), "")
		if l.has(key) && (l.has("expect") || l.has("expect_hex")) {
			l.problem(key, "expect, expect_hex and expect_regex are mutually exclusive")
		}
		if len(h.ExpectRegex) > maxPayload {
			l.problem(key, "%d bytes is more than %d", len(h.ExpectRegex), maxPayload)
			h.ExpectRegex = ""
		} else if _, err := regexp.Compile(h.ExpectRegex); err != nil {
			l.problem(key, "%v", err)
			h.ExpectRegex = ""
		}
	}
	return v
}

// expectBytes are the bytes a reply must start with: none with an
// expect_regex.
func expectBytes(h *Health) []byte {
	if h.ExpectRegex != "" {
		return nil
	}
	return h.Expect
}

// hexOf is the _hex form of a payload key: resolved with the text form,
// written by Format (which writes payloads as hex) when b gives bytes.
func hexOf(b func(h *Health) []byte) keyValue[Health] {
	return keyValue[Health]{
		toml: func(h *Health) string { return quoteTOML(hex.EncodeToString(b(h))) },
		omit: func(h *Health) bool { return b(h) == nil },
		copy: func(*Health, *Health) {},
		form: `"HEX BYTES"`,
	}
}

// healthToken is an http string key without spaces or control
// characters (msg is the problem otherwise).
func healthToken(f func(h *Health) *string, def, msg string) keyValue[Health] {
	v := stringOf(f, def, strconv.Quote)
	v.resolve = func(l *layer, key string, own, d rawTable, h *Health) {
		s := f(h)
		*s = l.str(key, get[string](own, key), get[string](d, key), def)
		if !isToken(*s) || key == "path" && !strings.HasPrefix(*s, "/") {
			l.problem(key, msg, *s)
		}
	}
	return v
}

// healthWebSocket resolves websocket, then status, whose default it sets.
func healthWebSocket() keyValue[Health] {
	v := boolOf(func(h *Health) *bool { return &h.WebSocket }, false)
	ws, status := v.resolve, healthStatus().resolve
	v.resolve = func(l *layer, key string, own, def rawTable, h *Health) {
		ws(l, key, own, def, h)
		status(l, "status", own, def, h)
	}
	return v
}

// healthStatus is the status an http check expects.
func healthStatus() keyValue[Health] {
	return intBy(func(h *Health) *int { return &h.Status }, defaultStatus, span[int64](100, 599))
}

// defaultStatus is the status a check expects: 101 Switching Protocols
// for a WebSocket upgrade.
func defaultStatus(h *Health) int {
	if h.WebSocket {
		return 101
	}
	return 200
}

// healthCString is a database check string: sent as a C string, so
// without NUL bytes; Format leaves it out when empty.
func healthCString(f func(h *Health) *string) keyValue[Health] {
	v := stringOf(f, "", strconv.Quote).omitIf(func(h *Health) bool { return *f(h) == "" })
	str := v.resolve
	v.resolve = func(l *layer, key string, own, def rawTable, h *Health) {
		str(l, key, own, def, h)
		if strings.IndexByte(*f(h), 0) >= 0 {
			l.problem(key, "must not contain a NUL byte")
		}
	}
	return v
}

// checkNotEmptyCheck refuses a send_expect check with nothing to send
// and nothing to expect.
func checkNotEmptyCheck(l *layer, h *Health) {
	if h.Type == l4.CheckUDP && len(h.Send) == 0 && !anyFailed(l, "send", "send_hex") {
		key := "type"
		if l.has("send_hex") {
			key = "send_hex"
		} else if l.has("send") {
			key = "send"
		}
		l.problem(key, "a udp check sends a datagram and waits for the reply: set send or send_hex to something (a DNS server: type = \"dns\" with dns_name)")
	}
	if h.Type == l4.CheckSendExpect && len(h.Send) == 0 && len(h.Expect) == 0 && h.ExpectRegex == "" && !anyFailed(l, payloadKeys...) {
		l.problem(emptyCheckKey(l), "send_expect with nothing to send and nothing to expect is only a TCP connect: set send (or send_hex), expect, expect_hex or expect_regex to something, or use type = \"tcp\"")
	}
}

// checkRoleUser: a role is asked of the server by logging in.
func checkRoleUser(l *layer, h *Health) {
	if h.Role != l4.RoleAny && h.User == "" && (h.Type == l4.CheckPostgres || h.Type == l4.CheckMySQL) {
		l.problem("role", "role %s needs a user to log in and ask the server", h.Role)
	}
}

// healthSendProxy resolves send_proxy into the header version the checks
// send; h.SendProxy holds the VIP's proxy_protocol before. A VIP that
// sets it without sending the header itself is refused: the version
// would be a guess. From [defaults.health], it applies to the VIPs that
// send one.
func healthSendProxy() keyValue[Health] {
	return keyValue[Health]{
		resolve: func(l *layer, key string, own, def rawTable, h *Health) {
			vip := h.SendProxy
			sends := vip != l4.ProxyOff
			on := l.boolean(key, get[bool](own, key), get[bool](def, key), sends && h.Port == 0)
			switch {
			case !on || h.Type == l4.CheckNone:
				h.SendProxy = l4.ProxyOff
			case !sends:
				if l.ownSet(key) {
					l.problem(key, "the VIP sends its backends no PROXY header (proxy_protocol = \"off\"); set proxy_protocol = \"v1\" or \"v2\", which the checks then send too")
				}
				h.SendProxy = l4.ProxyOff
			}
		},
		text: func(h *Health) string { return h.SendProxy.String() },
		toml: func(h *Health) string { return strconv.FormatBool(h.SendProxy != l4.ProxyOff) },
		copy: func(dst, src *Health) { dst.SendProxy = src.SendProxy },
		form: "true | false",
	}
}
