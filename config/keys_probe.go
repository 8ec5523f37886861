// The health keys of the udp, dns and tls checks and of the agent check
// (HAProxy agent-check): rows of the health key table (keys_health.go
// appends them).

package config

import (
	"strconv"
	"strings"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// maxAgentSend bounds agent_send, in bytes.
const maxAgentSend = 1024

// probeKeys are the keys of the udp, dns and tls checks and of the agent.
var probeKeys = []key[Health]{
	{name: "dns_name", scope: dnsCheck, val: healthDNSName(),
		effect: EffectNow, note: probesRestart,
		doc: `dns: the name asked for (required). Pick one the server answers with NOERROR (a name of its zone, or for a resolver any name that exists): NXDOMAIN, SERVFAIL or REFUSED fail the check.`},
	{name: "dns_type", scope: dnsCheck, val: enumOf(func(h *Health) *l4.DNSType { return &h.DNSType }, l4.DNSTypeA, l4.DNSTypeNames()),
		effect: EffectNow, note: probesRestart,
		doc: `dns: the query type. A reply with no record of the type (NOERROR, empty answer) passes: the server answered.`},
	{name: "tls_server_name", scope: tlsCheck, val: healthTLSServerName(),
		effect: EffectNow, note: probesRestart, def: `none; a route's check: the route's first exact name`,
		doc: `tls: the server name the ClientHello carries (SNI), for a backend that picks its certificate, or refuses a handshake, by name.`},
	{name: "tls_verify", scope: tlsCheck, val: boolOf(func(h *Health) *bool { return &h.TLSVerify }, false), check: checkTLSVerify,
		effect: EffectNow, note: probesRestart,
		doc: `tls: verify the backend's certificate chain against the system's roots and tls_server_name (needs one); false, any certificate passes (self-signed ones, IP addresses): the check is that the server speaks TLS.`},
	{name: "agent_port", val: intOf(func(h *Health) *int { return &h.AgentPort }, 0, span[int64](0, 65535)),
		effect: EffectNow, note: "what the old agent said is dropped when the port changes",
		doc: `The TCP port of an agent on each backend's own address (HAProxy agent-check; reached directly, also for xdp VIPs, without a PROXY header): every agent_interval l4lb connects, sends agent_send, and reads one line of words, which it applies until another reply changes them: "75%", the weight as a share of the file's; "maxconn:30", the backend's cap on live flows (0: none; proxy VIPs); "drain", no new flows (established and pinned ones stay); "maint", no new flows and pinned flows move; "ready", both lifted; "down", "fail" or "stopped", the backend is out (as a failed check: pinned flows move, on_down applies); "up", lifted. Words are separated by spaces, tabs or commas, "#" starts a comment. An agent that cannot be reached, stays silent or says nothing understood changes nothing (the check tests the backend); status shows its last reply and error. 0 = no agent. Runs beside any check type, none too.`},
	{name: "agent_interval", scope: withAgent, refused: agentOnly, val: healthAgentDuration(func(h *Health) *time.Duration { return &h.AgentInterval }, func(h *Health) time.Duration { return h.Interval }, span(100*time.Millisecond, time.Hour)),
		effect: EffectNow, note: probesRestart, def: "interval",
		doc: `Time between agent checks of a backend (jittered).`},
	{name: "agent_timeout", scope: withAgent, refused: agentOnly, val: healthAgentDuration(func(h *Health) *time.Duration { return &h.AgentTimeout }, func(h *Health) time.Duration { return min(h.Timeout, h.AgentInterval) }, span(time.Millisecond, time.Hour)),
		check: checkAgentTimeout, effect: EffectNow, note: probesRestart, def: "timeout", rule: "1ms..1h, at most agent_interval",
		doc: `An agent that has not sent its line within this long is skipped for this round (the state stays).`},
	{name: "agent_send", scope: withAgent, refused: agentOnly, val: healthAgentSend(),
		effect: EffectNow, note: probesRestart,
		doc: `Text sent to the agent once connected (HAProxy agent-send; "\n" for an agent that waits for a line); none by default: the agent speaks first.`},
}

// The scopes of the probe keys.
var (
	dnsCheck = healthScope{l4.CheckDNS}
	tlsCheck = healthScope{l4.CheckTLS}
)

// agentScope is a health table with an agent (agent_port not 0).
type agentScope struct{}

func (agentScope) applies(h *Health) bool { return h.AgentPort != 0 }
func (agentScope) String() string         { return "health tables with agent_port" }

var withAgent agentScope

// agentOnly is the problem of an agent key set without an agent.
const agentOnly = "applies only with agent_port (the agent check is off without one)"

// healthDNSName resolves dns_name: a DNS name, stored lower case without
// the trailing dot.
func healthDNSName() keyValue[Health] {
	v := stringOf(func(h *Health) *string { return &h.DNSName }, "", strconv.Quote).omitIf(func(h *Health) bool { return h.DNSName == "" })
	v.resolve = func(l *layer, key string, own, def rawTable, h *Health) {
		h.DNSName = strings.TrimSuffix(strings.ToLower(l.str(key, get[string](own, key), get[string](def, key), "")), ".")
		switch {
		case l.failed[key] || h.Type != l4.CheckDNS:
		case h.DNSName == "" && !l.has(key):
			l.problem("type", "a dns check asks for a name: set dns_name to one the server answers with NOERROR (a name of its zone)")
		case h.DNSName == "":
			l.problem(key, "a dns check asks for a name: set dns_name to one the server answers with NOERROR (a name of its zone)")
		case strings.HasPrefix(h.DNSName, "*."):
			l.problem(key, "%q: a query asks for one name, not a wildcard", h.DNSName)
		default:
			if err := checkServerName(h.DNSName); err != nil {
				l.problem(key, "%q: %v", h.DNSName, err)
			}
		}
	}
	v.form = `"NAME"`
	return v
}

// healthTLSServerName resolves tls_server_name: a DNS name (a route's
// check gets its default from the route, after buildHealth).
func healthTLSServerName() keyValue[Health] {
	v := stringOf(func(h *Health) *string { return &h.TLSServerName }, "", strconv.Quote).omitIf(func(h *Health) bool { return h.TLSServerName == "" })
	v.resolve = func(l *layer, key string, own, def rawTable, h *Health) {
		h.TLSServerName = strings.TrimSuffix(strings.ToLower(l.str(key, get[string](own, key), get[string](def, key), h.TLSServerName)), ".")
		if !l.ok(key) || h.Type != l4.CheckTLS {
			return
		}
		if err := checkServerName(h.TLSServerName); err != nil || strings.HasPrefix(h.TLSServerName, "*.") {
			l.problem(key, "%q is not a server name a ClientHello may carry (a DNS name, no wildcard)", h.TLSServerName)
		}
	}
	v.form = `"NAME"`
	return v
}

// checkTLSVerify: a certificate is verified against a name.
func checkTLSVerify(l *layer, h *Health) {
	if h.Type == l4.CheckTLS && h.TLSVerify && h.TLSServerName == "" && !l.failed["tls_server_name"] {
		l.problem("tls_verify", "verifying a certificate needs the name it must carry: set tls_server_name")
	}
}

// healthAgentDuration is an agent duration whose built-in value is
// another key's (def).
func healthAgentDuration(f func(*Health) *time.Duration, def func(*Health) time.Duration, r bounds[time.Duration]) keyValue[Health] {
	v := durationOf(f, 0, r)
	v.resolve = func(l *layer, key string, own, d rawTable, h *Health) {
		*f(h) = l.duration(key, get[string](own, key), get[string](d, key), def(h), r)
	}
	return v
}

// checkAgentTimeout: an agent check ends before the next starts.
func checkAgentTimeout(l *layer, h *Health) {
	if h.AgentPort != 0 && h.AgentTimeout > h.AgentInterval && !l.failed["agent_interval"] {
		key := "agent_timeout"
		if !l.has(key) {
			key = "agent_interval"
		}
		l.problem(key, "agent_timeout %s must not exceed agent_interval %s", fmtDuration(h.AgentTimeout), fmtDuration(h.AgentInterval))
	}
}

// healthAgentSend resolves agent_send: text of at most maxAgentSend bytes.
func healthAgentSend() keyValue[Health] {
	return keyValue[Health]{
		resolve: func(l *layer, key string, own, def rawTable, h *Health) {
			s := l.str(key, get[string](own, key), get[string](def, key), "")
			if len(s) > maxAgentSend {
				l.problem(key, "%d bytes is more than %d", len(s), maxAgentSend)
				return
			}
			if s != "" {
				h.AgentSend = []byte(s)
			}
		},
		text: func(h *Health) string { return quoteBytes(h.AgentSend) },
		toml: func(h *Health) string { return quoteTOML(string(h.AgentSend)) },
		omit: func(h *Health) bool { return len(h.AgentSend) == 0 },
		copy: func(dst, src *Health) { dst.AgentSend = src.AgentSend },
		form: `"TEXT"`,
	}
}
