// The example file shows real keys: each key it sets or shows commented
// out is one the parser takes. (Every key is documented, with its
// default and range, in docs/configuration.md, generated from the key
// tables: config/cmd/configdoc tests it.)

package config

import (
	"os"
	"regexp"
	"testing"
)

func TestExampleShowsRealKeys(t *testing.T) {
	data, err := os.ReadFile("../examples/l4lb.toml")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, table := range []string{"global", "defaults", "vip", "vip.health", "vip.backend", "vip.route", "xdp", "bgp", "bgp.peer"} {
		for key := range tableKeys(table) {
			known[key] = true
		}
	}
	// set, or shown commented out: "key = ..." or "# key = ..."
	shown := regexp.MustCompile(`(?m)^[ #]*([a-z_][a-z_0-9]*) = `).FindAllSubmatch(data, -1)
	if len(shown) < 100 {
		t.Fatalf("found %d keys in the example", len(shown))
	}
	for _, m := range shown {
		if key := string(m[1]); !known[key] {
			t.Errorf("examples/l4lb.toml shows %q, which is no key", key)
		}
	}
}
