package config_test

import (
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
)

// TestDropCapabilitiesKey: off by default, parsed, printed by Format, and
// a wrong type is a problem naming the key.
func TestDropCapabilitiesKey(t *testing.T) {
	tests := []struct {
		global  string
		want    bool
		problem string
	}{
		{"", false, ""},
		{"drop_capabilities = true\n", true, ""},
		{"drop_capabilities = false\n", false, ""},
		{"drop_capabilities = \"yes\"\n", false, "drop_capabilities"},
	}
	for _, tc := range tests {
		c, err := config.Parse("t.toml", []byte("[global]\n"+tc.global+trustVIP))
		if tc.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("%q: error %v, want one about %s", tc.global, err, tc.problem)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.global, err)
		}
		if c.Global.DropCapabilities != tc.want {
			t.Errorf("%q: DropCapabilities %v, want %v", tc.global, c.Global.DropCapabilities, tc.want)
		}
		back, err := config.Parse("formatted", config.Format(c, config.FormatOptions{}))
		if err != nil || back.Global.DropCapabilities != tc.want {
			t.Errorf("%q: Format round trip: %v, %v", tc.global, err, back)
		}
	}
}
