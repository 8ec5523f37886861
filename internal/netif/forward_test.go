// forward_test.go: the forwarding sysctls, read and switched on inside a test namespace.
package netif_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/l4lb/l4lb/internal/netif"
	"github.com/l4lb/l4lb/internal/testutil"
)

// TestForwarding runs on a locked OS thread inside a fresh namespace: the
// sysctls follow the calling thread's namespace, so nothing outside it can
// change. Enable writes only what is off and says what it changed.
func TestForwarding(t *testing.T) {
	ns := testutil.NewNetns(t, "fwd")
	ns.MustDo(t, func() error {
		// A new namespace may inherit IPv4 forwarding from the host: start off.
		for _, p := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(p, []byte("0"), 0o644); err != nil {
				return err
			}
		}
		return checkForwardingSteps()
	})
}

func checkForwardingSteps() error {
	steps := []struct {
		enable, wantChanged, wantAfter netif.Forwarding
	}{
		{netif.Forwarding{}, netif.Forwarding{}, netif.Forwarding{}},
		{netif.Forwarding{IPv4: true}, netif.Forwarding{IPv4: true}, netif.Forwarding{IPv4: true}},
		{netif.Forwarding{IPv4: true, IPv6: true}, netif.Forwarding{IPv6: true}, netif.Forwarding{IPv4: true, IPv6: true}},
		{netif.Forwarding{IPv4: true, IPv6: true}, netif.Forwarding{}, netif.Forwarding{IPv4: true, IPv6: true}},
	}
	for i, s := range steps {
		changed, err := netif.EnableForwarding(s.enable)
		if err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		after, err := netif.ReadForwarding()
		if err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		if changed != s.wantChanged || after != s.wantAfter {
			return fmt.Errorf("step %d: Enable(%+v) changed %+v, now %+v; want %+v, %+v", i, s.enable, changed, after, s.wantChanged, s.wantAfter)
		}
	}
	// IPv4's switch turns every interface's forwarding on with it, which is
	// what bpf_fib_lookup reads for the ingress interface.
	if lo, err := netif.InterfaceForwarding("lo"); err != nil || lo != (netif.Forwarding{IPv4: true, IPv6: true}) {
		return fmt.Errorf("InterfaceForwarding(lo) = %+v, %v; want both on", lo, err)
	}
	if _, err := netif.InterfaceForwarding("../all"); err == nil {
		return fmt.Errorf("InterfaceForwarding(../all) accepted a path")
	}
	return nil
}
