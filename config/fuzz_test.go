// Fuzzing Parse: no panic, an error is an *Error whose every problem is
// located, and a config without error is usable and survives Format:
// the formatted file parses to the same config and formats to itself.

package config_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
)

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("../examples/l4lb.toml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, s := range []string{
		"",
		"[[vip]]",
		"[[vip]]\nname = \"a\"\nlisten = \"198.18.0.1:1\"\n[[vip.backend]]\naddress = \"198.18.1.1:1\"\n",
		"[[vip]]\nname = \"a\"\nlisten = \"[2001:db8::1]:1\"\nbackend = [{address = \"[2001:db8::2]:1\", weight = 0}]\n",
		"[[vip]]\nhealth = { intervall = \"1s\" }\n[[vip.backend]]\n",
		"[defaults]\nname = 1\n[defaults.health]\ntype = \"http\"\nstatus = 101\n",
		"[xdp]\ninterface = \"eth0\"\n[[vip]]\nmode = \"xdp\"\nalgorithm = \"maglev\"\nmaglev_table_size = 1009\n",
		"vip = \"x\"",
		"[vip]\nname = 'x'",
		"a = \"\"\"\n[[vip]]\n\"\"\"\n",
		"[[vip]]\nname = \"a\"\nlisten = \"198.18.0.1:1\"\n[vip.health]\ntype = \"send_expect\"\nexpect_regex = \"(\"\nsend_hex = \"zz\"\n",
		"[global]\ndrain_timeout = \"-1s\"\npipe_size = 1e9\n",
		"[[vip]]\nName = \"a\"\n[[vip.Backend]]\n",
		"[bgp]\nasn = 65001\nrouter_id = \"198.18.0.2\"\nnext_hop = \"2001:db8::1\"\ncommunities = [\"65001:100\"]\n[[bgp.peer]]\naddress = \"198.18.0.1\"\nasn = 65000\npassword = \"p\"\nhold_time = \"3s\"\n[[vip]]\nname = \"a\"\nlisten = \"198.18.0.10:80\"\nannounce = false\n[[vip.backend]]\naddress = \"198.18.1.1:80\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse("fuzz.toml", data)
		if err != nil {
			checkError(t, c, err)
			return
		}
		if len(c.VIPs) == 0 {
			t.Fatal("valid config without a VIP")
		}
		back := roundTrip(t, c)
		once, twice := config.Format(c, config.FormatOptions{ShowSecrets: true}), config.Format(back, config.FormatOptions{ShowSecrets: true})
		if !bytes.Equal(afterLine(once), afterLine(twice)) {
			t.Fatalf("Format is not a fixed point:\n%s\nthen\n%s", once, twice)
		}
		for _, v := range c.VIPs {
			if len(v.Backends) == 0 {
				t.Fatalf("VIP %q without backends", v.Name)
			}
			if !v.Listen.IsValid() || v.Listen.Port() == 0 {
				t.Fatalf("VIP %q listen %v", v.Name, v.Listen)
			}
			for _, b := range v.Backends {
				checkBackend(t, v.Name, b)
			}
		}
	})
}

// checkBackend wants a concrete address with a port, or a DNS-named
// backend (a host name with a port, or an SRV name) and no address.
func checkBackend(t *testing.T, vip string, b config.Backend) {
	switch {
	case b.SRV != "":
		if b.Address.IsValid() || b.Host != "" {
			t.Fatalf("VIP %q backend srv %q with an address too", vip, b.SRV)
		}
	case b.Host != "":
		if b.Address.IsValid() || b.Port == 0 {
			t.Fatalf("VIP %q backend %q port %d address %v", vip, b.Host, b.Port, b.Address)
		}
	case !b.Address.IsValid() || b.Address.Port() == 0:
		t.Fatalf("VIP %q backend %v", vip, b.Address)
	}
}

// afterLine drops Format's first line, a comment naming the source file.
func afterLine(b []byte) []byte {
	_, rest, _ := bytes.Cut(b, []byte("\n"))
	return rest
}

// checkError wants an *Error alone, with every problem named and located.
func checkError(t *testing.T, c *config.Config, err error) {
	var cerr *config.Error
	if c != nil || !errors.As(err, &cerr) || len(cerr.Problems) == 0 {
		t.Fatalf("Parse = %v, %v", c, err)
	}
	for _, p := range cerr.Problems {
		if p.File != "fuzz.toml" || p.Msg == "" || !strings.HasPrefix(p.String(), "fuzz.toml:") {
			t.Fatalf("bad problem %+v", p)
		}
	}
}
