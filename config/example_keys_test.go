// The example file documents every key of the schema.

package config

import (
	"os"
	"regexp"
	"testing"
)

func TestExampleShowsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../examples/l4lb.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"global", "defaults", "vip", "vip.health", "vip.backend", "vip.route", "xdp", "bgp", "bgp.peer"} {
		for key, isTable := range tableKeys(table) {
			// set, or shown commented out: "key = ..." or "# key = ..."
			if !isTable && !regexp.MustCompile(`(?m)^[ #]*`+key+` = `).Match(data) {
				t.Errorf("examples/l4lb.toml does not show %s key %q", table, key)
			}
		}
	}
}
