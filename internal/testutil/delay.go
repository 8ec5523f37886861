// delay.go: a Topology whose backends sit behind a router that adds per-backend latency.

package testutil

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// DelayNet is a Topology with a router namespace between the balancer and
// the backends; packets from the balancer side to backend i are held
// delays[i] (one direction only, so backend i's RTT grows by delays[i]).
//
//	client c0 198.18.0.2/24 --veth-- lb x0 198.18.0.1/24
//	lb xr0 198.18.3.1/30 --veth-- router r0 198.18.3.2/30
//	router br0 198.18.1.1/24 --veth-- backend i b0 198.18.1.(11+i)/24
//	VIP 198.18.2.10 on lb's lo; ip_forward on in lb and router.
//
// In the router, a rule sends packets that arrive on r0 for a delayed
// backend i into TUN dl<i>, whose delay line writes them back after
// delays[i]; the kernel then forwards them to br0. Traffic the balancer
// itself opens to backends leaves from 198.18.3.1, not 198.18.1.1.
type DelayNet struct {
	*Topology
	Router *Netns
	lines  []*delayLine // by backend; nil where the delay is 0
}

// NewDelayTopology is NewDelayNet for tests that only need the Topology.
func NewDelayTopology(t testing.TB, delays []time.Duration) *Topology {
	t.Helper()
	return NewDelayNet(t, delays).Topology
}

// NewDelayNet builds the delayed network with one backend per delay. It is
// torn down on cleanup: delay lines stopped, TUNs and namespaces removed.
// Links are configured with one "ip -batch" per namespace: on a loaded
// machine each ip process costs ~80 ms.
func NewDelayNet(t testing.TB, delays []time.Duration) *DelayNet {
	t.Helper()
	RequirePriv(t, "network namespaces and TUN devices")
	for i, d := range delays {
		if d < 0 {
			t.Fatalf("delay net: backend %d: negative delay %v", i, d)
		}
	}
	dn := &DelayNet{
		Topology: &Topology{
			Client:   NewNetns(t, "cli"),
			LB:       NewNetns(t, "lb"),
			VIP:      netip.MustParseAddr("198.18.2.10"),
			LBAddr:   netip.MustParseAddr("198.18.0.1"),
			ClientIP: netip.MustParseAddr("198.18.0.2"),
		},
		Router: NewNetns(t, "rtr"),
		lines:  make([]*delayLine, len(delays)),
	}
	for i := range delays {
		dn.Backends = append(dn.Backends, NewNetns(t, fmt.Sprintf("be%d", i)))
	}
	// rp_filter off before the router's links exist, so that they inherit it.
	setSysctls(t, dn.Router, "net.ipv4.ip_forward=1",
		"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
	setSysctls(t, dn.LB, "net.ipv4.ip_forward=1")
	dn.wireBalancer(t)
	mtu := dn.startDelays(t, delays)
	dn.wireRouter(t, delays, mtu)
	for i := range delays {
		dn.wireBackend(t, i)
	}
	return dn
}

// DelayStats returns how many packets backend i's delay line forwarded and
// dropped (queue overflow or write error); zeros for an undelayed backend.
func (dn *DelayNet) DelayStats(i int) (passed, dropped uint64) {
	if l := dn.lines[i]; l != nil {
		return l.passed.Load(), l.dropped.Load()
	}
	return 0, 0
}

// wireBalancer links lb to the client and to the router (r0 stays down
// until the router's batch) and configures lb and client.
func (dn *DelayNet) wireBalancer(t testing.TB) {
	t.Helper()
	ipBatch(t, dn.LB,
		"link add x0 type veth peer name c0 netns "+dn.Client.Name,
		"link add xr0 type veth peer name r0 netns "+dn.Router.Name,
		"addr add 198.18.0.1/24 dev x0",
		"addr add 198.18.3.1/30 dev xr0",
		"addr add 198.18.2.10/32 dev lo",
		"link set x0 up",
		"link set xr0 up",
		"route add 198.18.1.0/24 via 198.18.3.2")
	ipBatch(t, dn.Client,
		"addr add 198.18.0.2/24 dev c0",
		"link set c0 up",
		"route add default via 198.18.0.1")
}

// startDelays creates TUN dl<i> in the router for each delayed backend and
// starts its delay line; it returns r0's MTU, which the TUNs must share.
func (dn *DelayNet) startDelays(t testing.TB, delays []time.Duration) int {
	t.Helper()
	var mtu int
	dn.Router.MustDo(t, func() error {
		var err error
		mtu, err = linkMTU("r0")
		return err
	})
	for i, d := range delays {
		if d > 0 {
			dn.lines[i] = startDelay(t, dn.Router, fmt.Sprintf("dl%d", i), d)
		}
	}
	return mtu
}

// startDelay opens TUN name in ns and runs a delay line on it until cleanup.
func startDelay(t testing.TB, ns *Netns, name string, d time.Duration) *delayLine {
	t.Helper()
	var tun *os.File
	ns.MustDo(t, func() (err error) {
		tun, err = openTUN(name)
		return err
	})
	l := startDelayLine(tun, name, d)
	t.Cleanup(func() {
		if err := l.stop(); err != nil {
			t.Errorf("delay net: %v", err)
		}
	})
	return l
}

// wireRouter makes the backend bridge with one veth per backend, the routes
// back to the client and VIP networks, and for each delayed backend i a
// rule sending packets from r0 to it into dl<i>. Packets written back
// arrive on dl<i>, not r0, so they take the main table to br0.
func (dn *DelayNet) wireRouter(t testing.TB, delays []time.Duration, mtu int) {
	t.Helper()
	cmds := []string{
		"link add br0 type bridge",
		"addr add 198.18.1.1/24 dev br0",
		"link set br0 up",
		"addr add 198.18.3.2/30 dev r0",
		"link set r0 up",
		"route add 198.18.0.0/24 via 198.18.3.1",
		"route add 198.18.2.0/24 via 198.18.3.1",
	}
	for i, d := range delays {
		cmds = append(cmds,
			fmt.Sprintf("link add rb%d type veth peer name b0 netns %s", i, dn.Backends[i].Name),
			fmt.Sprintf("link set rb%d master br0", i),
			fmt.Sprintf("link set rb%d up", i))
		if d > 0 {
			table := 100 + i
			cmds = append(cmds,
				fmt.Sprintf("link set dl%d mtu %d up", i, mtu),
				fmt.Sprintf("route add default dev dl%d table %d", i, table),
				fmt.Sprintf("rule add iif r0 to %s/32 lookup %d priority %d", dn.BackendIP(i), table, table))
		}
	}
	ipBatch(t, dn.Router, cmds...)
	// Devices got rp_filter=0 from "default"; set it on each anyway, in case
	// the namespace started with other defaults.
	dn.Router.MustDo(t, disableRPFilter)
}

// wireBackend configures backend i's end of its link.
func (dn *DelayNet) wireBackend(t testing.TB, i int) {
	t.Helper()
	ipBatch(t, dn.Backends[i],
		"addr add "+dn.BackendIP(i).String()+"/24 dev b0",
		"link set b0 up",
		"route add default via 198.18.1.1")
}

// linkMTU returns the MTU of dev in the calling thread's namespace.
func linkMTU(dev string) (int, error) {
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return 0, fmt.Errorf("mtu of %s: %w", dev, err)
	}
	return ifc.MTU, nil
}

// disableRPFilter sets rp_filter=0 on every interface of the calling
// thread's namespace: strict and loose both drop what a delay line writes back.
func disableRPFilter() error {
	ifcs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifc := range ifcs {
		if err := writeSysctl("net.ipv4.conf." + ifc.Name + ".rp_filter=0"); err != nil {
			return err
		}
	}
	return nil
}

// setSysctls applies "key=value" net sysctls inside ns without a process.
func setSysctls(t testing.TB, ns *Netns, kvs ...string) {
	t.Helper()
	ns.MustDo(t, func() error {
		for _, kv := range kvs {
			if err := writeSysctl(kv); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeSysctl applies one "key=value" sysctl in the calling thread's
// namespace: /proc/sys/net follows the opener's network namespace.
// Keys use dots, so device names must not contain any.
func writeSysctl(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("sysctl %q: want key=value", kv)
	}
	path := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		return fmt.Errorf("sysctl %s: %w", k, err)
	}
	return nil
}

// ipBatch runs ip commands (one per line, without "ip") inside ns with a
// single process; it stops at the first failing line.
func ipBatch(t testing.TB, ns *Netns, lines ...string) {
	t.Helper()
	cmd := exec.Command("ip", "-n", ns.Name, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s -batch: %v: %s", ns.Name, err, out)
	}
}
