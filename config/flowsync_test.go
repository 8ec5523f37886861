package config_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
)

const flowSyncTable = "[flow_sync]\nlisten = \"198.18.3.10:7946\"\npeers = [\"198.18.3.11:7946\"]\nkey = \"0123456789abcdef-secret\"\n"

func TestFlowSyncTable(t *testing.T) {
	c := mustParse(t, flowSyncTable+bgpVIP)
	f := c.FlowSync
	if f == nil || f.Listen != netip.MustParseAddrPort("198.18.3.10:7946") || len(f.Peers) != 1 || f.Key != "0123456789abcdef-secret" ||
		f.Interval != time.Second || f.MaxRate != 50000 || f.MaxEntries != 262144 {
		t.Fatalf("flow_sync = %+v", f)
	}
	out := string(config.Format(c, config.FormatOptions{}))
	if strings.Contains(out, "abcdef-secret") || !strings.Contains(out, "[flow_sync]") {
		t.Fatalf("Format leaks the key or drops the table:\n%s", out)
	}
	back := mustParse(t, string(config.Format(c, config.FormatOptions{ShowSecrets: true})))
	if back.FlowSync.Key != f.Key || back.FlowSync.Listen != f.Listen {
		t.Fatalf("round trip: %+v", back.FlowSync)
	}
	ch := config.Diff(c, mustParse(t, strings.Replace(flowSyncTable, "-secret", "-another", 1)+bgpVIP), config.DiffOptions{})
	if len(ch.Global) != 1 || ch.Global[0].Key != "flow_sync" || strings.Contains(ch.Global[0].Old+ch.Global[0].New, "secret") {
		t.Fatalf("a key change: %+v", ch.Global)
	}
	for _, tc := range []struct{ table, want string }{
		{"[flow_sync]\npeers = [\"198.18.3.11:7946\"]\nkey = \"0123456789abcdef\"\n", "flow_sync.listen: is required"},
		{"[flow_sync]\nlisten = \"198.18.3.10:7946\"\nkey = \"0123456789abcdef\"\n", "flow_sync.peers: is required"},
		{"[flow_sync]\nlisten = \"198.18.3.10:7946\"\npeers = [\"198.18.3.11:7946\"]\n", "flow_sync.key: is required"},
		{strings.Replace(flowSyncTable, "0123456789abcdef-secret", "short", 1), "flow_sync.key: is 5 bytes"},
		{strings.Replace(flowSyncTable, "198.18.3.11:7946", "198.18.3.11", 1), "flow_sync.peers: [0]"},
		{strings.Replace(flowSyncTable, "198.18.3.10:7946", "0.0.0.0:7946", 1), "flow_sync.listen"},
		{flowSyncTable + "interval = \"1ms\"\n", "flow_sync.interval"},
		{flowSyncTable + "peer = []\n", "peer"},
	} {
		_, err := config.Parse("t.toml", []byte(tc.table+bgpVIP))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to mention %q", tc.table, err, tc.want)
		}
	}
}
