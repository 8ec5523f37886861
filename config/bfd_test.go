package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
)

const bfdBGP = "[bgp]\nasn = 65001\nrouter_id = \"198.18.0.2\"\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 65000\n"

// TestBFDPeer: the inline table of the issue, its defaults, no table (no
// BFD), Format's round trip, Diff, and the problems with their paths.
func TestBFDPeer(t *testing.T) {
	c := mustParse(t, bfdBGP+"bfd = { interval = \"100ms\", multiplier = 3 }\n"+bgpVIP)
	if b := c.BGP.Peers[0].BFD; b == nil || b.Interval != 100*time.Millisecond || b.Multiplier != 3 {
		t.Fatalf("bfd = %+v", b)
	}
	out := string(config.Format(c, config.FormatOptions{}))
	if !strings.Contains(out, "[bgp.peer.bfd]\ninterval = \"100ms\"\nmultiplier = 3\n") {
		t.Fatalf("Format:\n%s", out)
	}
	if back := mustParse(t, out); back.BGP.Peers[0].BFD == nil || *back.BGP.Peers[0].BFD != *c.BGP.Peers[0].BFD {
		t.Fatalf("Format does not round-trip:\n%s", out)
	}
	if b := mustParse(t, bfdBGP+"bfd = {}\n"+bgpVIP).BGP.Peers[0].BFD; b == nil || b.Interval != 300*time.Millisecond || b.Multiplier != 3 {
		t.Fatalf("defaults: %+v", b)
	}
	if b := mustParse(t, bfdBGP+bgpVIP).BGP.Peers[0].BFD; b != nil {
		t.Fatalf("no table, but bfd %+v", b)
	}
	ch := config.Diff(c, mustParse(t, bfdBGP+"bfd = { interval = \"200ms\" }\n"+bgpVIP), config.DiffOptions{})
	if len(ch.Global) != 1 || !strings.Contains(ch.Global[0].Old, "bfd 100ms x 3") || !strings.Contains(ch.Global[0].New, "bfd 200ms x 3") {
		t.Fatalf("diff %+v", ch.Global)
	}
	for _, tc := range []struct{ bfd, want string }{
		{`bfd = { interval = "1ms" }`, "bgp.peer[0].bfd.interval"},
		{`bfd = { multiplier = 0 }`, "bgp.peer[0].bfd.multiplier"},
		{`bfd = { intervall = "100ms" }`, "intervall"},
		{`bfd = true`, "bfd"},
	} {
		_, err := config.Parse("t.toml", []byte(bfdBGP+tc.bfd+"\n"+bgpVIP))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.bfd, err, tc.want)
		}
	}
}
