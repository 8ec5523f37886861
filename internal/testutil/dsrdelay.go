// dsrdelay.go: latency on one backend of a DSR network, for the packets it sends to one address (the balancer's probes' replies).

package testutil

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// DelayFrom holds every packet that host h itself sends to dst for delay,
// through a delay line on a TUN device in h's namespace: a rule sends
// h's own packets to dst (iif lo) into the TUN, and the kernel forwards
// what the line writes back out of h's link. With dst the balancer's
// address, the handshake RTT the balancer's probes measure to h grows by
// delay, while h's replies to clients (direct server return) are not held.
// It is undone on cleanup.
func (d *DSR) DelayFrom(t testing.TB, h *DSRHost, dst netip.Addr, delay time.Duration) {
	t.Helper()
	if !dst.Is4() || delay <= 0 {
		t.Fatalf("dsr delay: want an IPv4 destination and a positive delay, got %s %v", dst, delay)
	}
	const tun, table = "dly0", 100
	startDelay(t, h.NS, tun, delay)
	// Written-back packets come from one of h's own addresses: forwarded
	// only with forwarding on and accept_local on the TUN.
	setSysctls(t, h.NS, "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
		"net.ipv4.conf."+tun+".rp_filter=0", "net.ipv4.conf."+tun+".accept_local=1")
	ipBatch(t, h.NS,
		fmt.Sprintf("link set %s mtu %d up", tun, h.MTU),
		fmt.Sprintf("route add default dev %s table %d", tun, table),
		fmt.Sprintf("rule add iif lo to %s/32 lookup %d priority %d", dst, table, table))
}
