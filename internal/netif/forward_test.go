// forward_test.go: the forwarding sysctls, read inside a test namespace.

package netif_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/l4lb/l4lb/internal/netif"
	"github.com/l4lb/l4lb/internal/testutil"
)

// TestForwarding runs on a locked OS thread inside a fresh namespace: the
// sysctls follow the calling thread's namespace, so nothing outside it can
// change. The test switches forwarding; netif only reads it.
func TestForwarding(t *testing.T) {
	ns := testutil.NewNetns(t, "fwd")
	ns.MustDo(t, func() error {
		// A new namespace may inherit IPv4 forwarding from the host: start off.
		if err := setForwarding("0"); err != nil {
			return err
		}
		return checkForwardingSteps()
	})
}

func setForwarding(v string) error {
	for _, p := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func checkForwardingSteps() error {
	both := netif.Forwarding{IPv4: true, IPv6: true}
	if f, err := netif.ReadForwarding(); err != nil || f.Any() {
		return fmt.Errorf("ReadForwarding after switching off = %+v, %v", f, err)
	}
	if err := netif.CheckForwarding("lo", both); !errors.Is(err, netif.ErrForwardingOff) {
		return fmt.Errorf("CheckForwarding with forwarding off: %v", err)
	}
	if f, err := netif.ReadForwarding(); err != nil || f.Any() {
		return fmt.Errorf("CheckForwarding changed forwarding: %+v, %v", f, err)
	}
	if err := setForwarding("1"); err != nil {
		return err
	}
	// The global switch turns every interface's forwarding on with it,
	// which is what bpf_fib_lookup reads for the ingress interface.
	if lo, err := netif.InterfaceForwarding("lo"); err != nil || lo != both {
		return fmt.Errorf("InterfaceForwarding(lo) = %+v, %v; want both on", lo, err)
	}
	if err := netif.CheckForwarding("lo", both); err != nil {
		return fmt.Errorf("CheckForwarding with forwarding on: %v", err)
	}
	if _, err := netif.InterfaceForwarding("../all"); err == nil {
		return fmt.Errorf("InterfaceForwarding(../all) accepted a path")
	}
	return nil
}
