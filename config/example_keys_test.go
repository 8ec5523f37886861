// The example file documents every key of the schema.

package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestExampleShowsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../examples/l4lb.toml")
	if err != nil {
		t.Fatal(err)
	}
	for table, v := range map[string]any{
		"global": rawGlobal{}, "vip": rawVIP{}, "defaults": rawTuning{},
		"health": rawHealth{}, "backend": rawBackend{}, "xdp": rawXDP{}, "route": rawRoute{},
		"bgp": rawBGP{}, "bgp.peer": rawBGPPeer{},
	} {
		for _, key := range tomlKeys(reflect.TypeOf(v)) {
			// set, or shown commented out: "key = ..." or "# key = ..."
			if !regexp.MustCompile(`(?m)^[ #]*` + key + ` = `).Match(data) {
				t.Errorf("examples/l4lb.toml does not show %s key %q", table, key)
			}
		}
	}
}

// tomlKeys lists the toml tags of a raw struct, embedded structs included.
func tomlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			keys = append(keys, tomlKeys(f.Type)...)
			continue
		}
		if tag, _, _ := strings.Cut(f.Tag.Get("toml"), ","); tag != "" && tag != "health" && tag != "backend" && tag != "route" && tag != "peer" {
			keys = append(keys, tag)
		}
	}
	return keys
}
