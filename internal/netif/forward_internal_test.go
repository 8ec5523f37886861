// forward_internal_test.go: the forwarding logic against a fake /proc/sys, no privileges needed.
package netif

import (
	"os"
	"path/filepath"
	"testing"
)

func fakeProcSys(t *testing.T, v4, v6 string) string {
	t.Helper()
	root := t.TempDir()
	p4, p6 := forwardingPaths(root, "")
	for p, v := range map[string]string{p4: v4, p6: v6} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestEnableForwardingWritesOnlyWhatIsOff(t *testing.T) {
	root := fakeProcSys(t, "0\n", "2\n") // any non-zero value is on
	p4, p6 := forwardingPaths(root, "")
	changed, err := enableForwarding(root, Forwarding{IPv4: true, IPv6: true})
	if err != nil || changed != (Forwarding{IPv4: true}) {
		t.Fatalf("enable = %+v, %v; want IPv4 changed only", changed, err)
	}
	if b, _ := os.ReadFile(p4); string(b) != "1\n" {
		t.Errorf("ip_forward = %q, want 1", b)
	}
	if b, _ := os.ReadFile(p6); string(b) != "2\n" {
		t.Errorf("ipv6 forwarding rewritten to %q", b)
	}
	if got, err := readForwarding(root, ""); err != nil || got != (Forwarding{IPv4: true, IPv6: true}) {
		t.Errorf("read = %+v, %v", got, err)
	}
}

func TestEnableForwardingReportsErrors(t *testing.T) {
	root := t.TempDir() // no files at all
	if _, err := enableForwarding(root, Forwarding{IPv4: true}); err == nil {
		t.Error("enable without the sysctl file succeeded")
	}
	if changed, err := enableForwarding(root, Forwarding{}); err != nil || changed.Any() {
		t.Errorf("enable of nothing = %+v, %v; want no change and no error", changed, err)
	}
}
