// Format: what it prints parses back to the same Config.

package config_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
)

// sameConfig reports whether a and b hold the same settings (positions,
// warnings and the file name aside).
func sameConfig(a, b *config.Config) bool {
	norm := func(c *config.Config) config.Config {
		n := *c
		n.Path, n.Warnings = "", nil
		n.VIPs = append([]config.VIP(nil), c.VIPs...)
		for i := range n.VIPs {
			n.VIPs[i].Line = 0
			n.VIPs[i].Backends = append([]config.Backend(nil), c.VIPs[i].Backends...)
			for j := range n.VIPs[i].Backends {
				n.VIPs[i].Backends[j].Line = 0
			}
			n.VIPs[i].Routes = append([]config.Route(nil), c.VIPs[i].Routes...)
			for j := range n.VIPs[i].Routes {
				r := &n.VIPs[i].Routes[j]
				r.Line = 0
				r.Backends = append([]config.Backend(nil), r.Backends...)
				for k := range r.Backends {
					r.Backends[k].Line = 0
				}
			}
		}
		return n
	}
	na, nb := norm(a), norm(b)
	return reflect.DeepEqual(na.Global, nb.Global) && reflect.DeepEqual(na.XDP, nb.XDP) && reflect.DeepEqual(na.VIPs, nb.VIPs)
}

// roundTrip formats c and parses the result.
func roundTrip(t *testing.T, c *config.Config) *config.Config {
	t.Helper()
	out := config.Format(c, config.FormatOptions{ShowSecrets: true})
	back, err := config.Parse("formatted.toml", out)
	if err != nil {
		t.Fatalf("Format output does not parse: %v\n%s", err, out)
	}
	if !sameConfig(c, back) {
		t.Fatalf("Format output parses to another config:\n%s\nbefore %+v\nafter  %+v", out, c, back)
	}
	return back
}

func TestFormatRoundTrip(t *testing.T) {
	data, err := os.ReadFile("../examples/l4lb.toml")
	if err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, string(data))
	roundTrip(t, c)
	c2 := mustParse(t, `
[global]
admin_socket = "off"
resolvers = ["198.18.0.53", "[2001:db8::53]:5353"]
resolve_min = "1s"
resolve_max = "30s"
metrics_listen = "[::1]:9370"
[defaults]
keepalive = "0s"
defer_accept = true
first_byte_timeout = "250ms"
[[vip]]
name = "tricky"
listen = "[2001:db8::1]:6379"
algorithm = "maglev"
hash_key = "5tuple"
hash_balance_factor = 150
  [vip.health]
  type = "redis"
  user = "u\"\\\n"
  password = "p\u0001w"
  [[vip.backend]]
  name = "r1"
  address = "[2001:db8::2]:6379"
  weight = 0
[[vip]]
name = "named"
listen = "198.18.0.2:5432"
  [[vip.backend]]
  address = "pg-a.db.internal:5432"
  [[vip.backend]]
  name = "pool"
  srv = "_postgresql._tcp.db.internal"
  backup = true
  [[vip.backend]]
  address = "198.18.1.1:5432"
[[vip]]
name = "sx"
listen = "198.18.0.1:7"
  [vip.health]
  type = "send_expect"
  send_hex = "00 ff 0a"
  expect_regex = "^\\+OK"
  [[vip.backend]]
  address = "198.18.1.1:7"
`)
	roundTrip(t, c2)
}

func TestFormatRedactsPasswords(t *testing.T) {
	c := mustParse(t, oneVIP("  [vip.health]\n  type = \"postgres\"\n  user = \"u\"\n  password = \"s3cret\"\n"))
	out := string(config.Format(c, config.FormatOptions{}))
	if strings.Contains(out, "s3cret") || !strings.Contains(out, config.Redacted) {
		t.Fatalf("password not redacted:\n%s", out)
	}
}
