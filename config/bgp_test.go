package config_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
)

const bgpVIP = `
[[vip]]
name = "web"
listen = "198.18.0.10:80"
  [[vip.backend]]
  address = "198.18.1.1:80"
`

func TestBGPDefaults(t *testing.T) {
	c := mustParse(t, `
[bgp]
asn = 65001
router_id = "198.18.0.2"
communities = ["65001:100", "0:65535"]

[[bgp.peer]]
address = "198.18.0.1"
asn = 65000
password = "s3cret"
`+bgpVIP)
	b := c.BGP
	if b == nil || b.ASN != 65001 || b.RouterID != netip.MustParseAddr("198.18.0.2") || b.NextHop.IsValid() {
		t.Fatalf("BGP = %+v", b)
	}
	if b.HoldTime != 9*time.Second || b.ConnectRetry != time.Second || b.ShutdownGrace != 2*time.Second {
		t.Errorf("timers: hold %v retry %v grace %v", b.HoldTime, b.ConnectRetry, b.ShutdownGrace)
	}
	if len(b.Communities) != 2 || b.Communities[0] != 65001<<16|100 || b.Communities[1] != 65535 {
		t.Errorf("communities %v", b.Communities)
	}
	p := b.Peers[0]
	if p.Address != netip.MustParseAddr("198.18.0.1") || p.ASN != 65000 || p.Port != 179 || p.HoldTime != 0 || p.Password != "s3cret" {
		t.Errorf("peer %+v", p)
	}
	out := string(config.Format(c, config.FormatOptions{}))
	if strings.Contains(out, "s3cret") || !strings.Contains(out, `password = "<redacted>"`) {
		t.Errorf("Format leaks or drops the password:\n%s", out)
	}
	back := mustParse(t, string(config.Format(c, config.FormatOptions{ShowSecrets: true})))
	if got, want := config.Format(back, config.FormatOptions{}), config.Format(c, config.FormatOptions{}); string(got) != string(want) {
		t.Errorf("Format does not round-trip:\n%s\nvs\n%s", got, want)
	}
}

func TestBGPProblems(t *testing.T) {
	cases := []struct {
		name, bgp, want string
	}{
		{"no asn", "router_id = \"198.18.0.2\"\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 1", "bgp.asn: is required"},
		{"asn zero", "asn = 0\nrouter_id = \"198.18.0.2\"\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 1", "bgp.asn: must be 1..4294967295"},
		{"router id v6", "asn = 1\nrouter_id = \"2001:db8::1\"\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 1", "must be an IPv4 address"},
		{"no peer", "asn = 1\nrouter_id = \"198.18.0.2\"", "at least one peer"},
		{"bad community", "asn = 1\nrouter_id = \"198.18.0.2\"\ncommunities = [\"65536:1\"]\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 1", "bgp.communities: [0]"},
		{"short hold", "asn = 1\nrouter_id = \"198.18.0.2\"\nhold_time = \"1s\"\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 1", "bgp.hold_time"},
		{"dup peer", "asn = 1\nrouter_id = \"198.18.0.2\"\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 1\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 2", "bgp.peer[1].address: 198.18.0.1 is already a peer"},
		{"peer no address", "asn = 1\nrouter_id = \"198.18.0.2\"\n[[bgp.peer]]\nasn = 1", "bgp.peer[0].address: is required"},
		{"peer bad port", "asn = 1\nrouter_id = \"198.18.0.2\"\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 1\nport = 0", "bgp.peer[0].port"},
		{"unknown key", "asn = 1\nrouter_id = \"198.18.0.2\"\nkeepalive = \"3s\"\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 1", "keepalive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("t.toml", []byte("[bgp]\n"+tc.bgp+"\n"+bgpVIP))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestBGPDiff(t *testing.T) {
	base := "[bgp]\nasn = 65001\nrouter_id = \"198.18.0.2\"\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 65000\npassword = \"a\"\n"
	cases := []struct {
		name, next string
		changes    int
	}{
		{"same", base, 0},
		{"password", strings.Replace(base, `password = "a"`, `password = "b"`, 1), 1},
		{"peer added", base + "[[bgp.peer]]\naddress = \"198.18.0.3\"\nasn = 65000\n", 1},
		{"removed", "", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch := config.Diff(mustParse(t, base+bgpVIP), mustParse(t, tc.next+bgpVIP), config.DiffOptions{})
			if len(ch.Global) != tc.changes {
				t.Fatalf("changes %+v, want %d", ch.Global, tc.changes)
			}
			for _, c := range ch.Global {
				if strings.Contains(c.Old+c.New, `"a"`) || strings.Contains(c.Old+c.New, "password b") {
					t.Errorf("diff shows a password: %+v", c)
				}
			}
		})
	}
}

func TestAnnounceKey(t *testing.T) {
	cases := []struct {
		name, src string
		want      bool
	}{
		{"default", bgpVIP, true},
		{"vip off", strings.Replace(bgpVIP, "listen =", "announce = false\nlisten =", 1), false},
		{"defaults off", "[defaults]\nannounce = false\n" + bgpVIP, false},
		{"vip wins", "[defaults]\nannounce = false\n" + strings.Replace(bgpVIP, "listen =", "announce = true\nlisten =", 1), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustParse(t, tc.src).VIP("web").Announce; got != tc.want {
				t.Fatalf("Announce = %v, want %v", got, tc.want)
			}
		})
	}
}
