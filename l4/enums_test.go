package l4

import (
	"strings"
	"testing"
)

// TestConfigEnumNames: every enum the config names round-trips through
// its names list: each name parses to the value whose String it is, and
// a value past the list prints as kind(n).
func TestConfigEnumNames(t *testing.T) {
	for _, e := range []struct {
		names []string
		str   func(uint8) string
	}{
		{ModeNames(), func(v uint8) string { return Mode(v).String() }},
		{AlgorithmNames(), func(v uint8) string { return Algorithm(v).String() }},
		{HashKeyNames(), func(v uint8) string { return HashKey(v).String() }},
		{ForwardNames(), func(v uint8) string { return Forward(v).String() }},
		{CheckTypeNames(), func(v uint8) string { return CheckType(v).String() }},
		{ProxyVersionNames(), func(v uint8) string { return ProxyVersion(v).String() }},
		{ProxyAcceptNames(), func(v uint8) string { return ProxyAccept(v).String() }},
		{RTTMetricNames(), func(v uint8) string { return RTTMetric(v).String() }},
		{SNINoMatchNames(), func(v uint8) string { return SNINoMatch(v).String() }},
		{BackupModeNames(), func(v uint8) string { return BackupMode(v).String() }},
		{OnDownNames(), func(v uint8) string { return OnDown(v).String() }},
		{DBRoleNames(), func(v uint8) string { return DBRole(v).String() }},
		{AttachModeNames(), func(v uint8) string { return AttachMode(v).String() }},
		{LogLevelNames(), func(v uint8) string { return LogLevel(v).String() }},
		{LogFormatNames(), func(v uint8) string { return LogFormat(v).String() }},
		{DNSTypeNames(), func(v uint8) string { return DNSType(v).String() }},
	} {
		seen := map[string]bool{}
		for i, n := range e.names {
			v, ok := ParseName[uint8](n, e.names)
			if n == "" || seen[n] || !ok || int(v) != i || e.str(v) != n {
				t.Fatalf("%v: %q at %d parses to %d (%v), String %q", e.names, n, i, v, ok, e.str(v))
			}
			seen[n] = true
		}
		if _, ok := ParseName[uint8]("nope", e.names); ok {
			t.Fatalf("%v: parsed an unknown name", e.names)
		}
		if s := e.str(200); !strings.HasSuffix(s, "(200)") || len(s) < 6 {
			t.Fatalf("%v: unnamed value prints %q", e.names, s)
		}
	}
}

// TestProxyAcceptBits: the accept modes are bits of the versions they take.
func TestProxyAcceptBits(t *testing.T) {
	if AcceptProxyAny != AcceptProxyV1|AcceptProxyV2 || ProxyAccept(ProxyV1) != AcceptProxyV1 || ProxyAccept(ProxyV2) != AcceptProxyV2 {
		t.Fatal("accept modes are not the bits of the versions")
	}
}
