package plane

import (
	"errors"
	"testing"
)

// TestParseClient: CLIENT_IP[:PORT], bare or bracketed, unmapped; a zone,
// port 0 or garbage is ErrBadClient.
func TestParseClient(t *testing.T) {
	for _, s := range []string{"", "nonsense", "198.18.0.1:0", "198.18.0.1:99999", "[fe80::1%eth0]:80", "fe80::1%eth0", "198.18.0.1:"} {
		if _, err := ParseClient(s); !errors.Is(err, ErrBadClient) {
			t.Errorf("ParseClient(%q): %v", s, err)
		}
	}
	for s, want := range map[string]string{"198.18.0.1": "198.18.0.1:0", "198.18.0.1:80": "198.18.0.1:80", "[::ffff:198.18.0.1]:80": "198.18.0.1:80", "2001:db8::1": "[2001:db8::1]:0", "[2001:db8::1]:443": "[2001:db8::1]:443"} {
		if got, err := ParseClient(s); err != nil || got.String() != want {
			t.Errorf("ParseClient(%q) = %v, %v; want %s", s, got, err, want)
		}
	}
}
