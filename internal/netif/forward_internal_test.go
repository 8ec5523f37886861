// forward_internal_test.go: the forwarding logic against a fake /proc/sys, no privileges needed.

package netif

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeProcSys writes the global and eth0's forwarding flags under a
// temp root.
func fakeProcSys(t *testing.T, v4, v6, if4, if6 string) string {
	t.Helper()
	root := t.TempDir()
	p4, p6 := forwardingPaths(root, "")
	i4, i6 := forwardingPaths(root, "eth0")
	for p, v := range map[string]string{p4: v4, p6: v6, i4: if4, i6: if6} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestCheckForwarding: what is on passes, what is off names the exact
// sysctl (the global switch, or the interface's own when only that is
// off), and nothing is ever written.
func TestCheckForwarding(t *testing.T) {
	for _, c := range []struct {
		name             string
		v4, v6, if4, if6 string
		need             Forwarding
		want             string // "" = no error
	}{
		{"all on", "1\n", "1\n", "1\n", "2\n", Forwarding{IPv4: true, IPv6: true}, ""},
		{"nothing needed", "0\n", "0\n", "0\n", "0\n", Forwarding{}, ""},
		{"v6 off, only v4 needed", "1\n", "0\n", "1\n", "0\n", Forwarding{IPv4: true}, ""},
		{"v4 off", "0\n", "0\n", "0\n", "0\n", Forwarding{IPv4: true}, "for IPv4 on eth0 (set it with `sysctl -w net.ipv4.ip_forward=1`"},
		{"v4 off on the interface only", "1\n", "0\n", "0\n", "0\n", Forwarding{IPv4: true}, "`sysctl -w net.ipv4.conf.eth0.forwarding=1`"},
		{"both off", "0\n", "0\n", "0\n", "0\n", Forwarding{IPv4: true, IPv6: true},
			"for IPv4 and IPv6 on eth0 (set it with `sysctl -w net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1` and keep it in /etc/sysctl.d/; interfaces that take their IPv6 default route from router advertisements need accept_ra=2 first)"},
		{"v6 off on the interface only", "1\n", "1\n", "1\n", "0\n", Forwarding{IPv4: true, IPv6: true}, "`sysctl -w net.ipv6.conf.eth0.forwarding=1`"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := fakeProcSys(t, c.v4, c.v6, c.if4, c.if6)
			err := checkForwarding(root, "eth0", c.need)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case c.want != "" && (!errors.Is(err, ErrForwardingOff) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want ErrForwardingOff with %q", err, c.want)
			}
			p4, p6 := forwardingPaths(root, "")
			for p, v := range map[string]string{p4: c.v4, p6: c.v6} {
				if b, _ := os.ReadFile(p); string(b) != v {
					t.Errorf("%s rewritten to %q", p, b)
				}
			}
		})
	}
}

func TestCheckForwardingReportsErrors(t *testing.T) {
	root := t.TempDir() // no files at all
	if err := checkForwarding(root, "eth0", Forwarding{IPv4: true}); err == nil || errors.Is(err, ErrForwardingOff) {
		t.Errorf("check without the sysctl files: %v, want a read error", err)
	}
	if err := checkForwarding(root, "eth0", Forwarding{}); err != nil {
		t.Errorf("check of nothing: %v", err)
	}
	if err := CheckForwarding("../all", Forwarding{IPv4: true}); err == nil {
		t.Error("CheckForwarding(../all) accepted a path")
	}
}
