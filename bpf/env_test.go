// Test harness: a loaded balancer, a namespace with routes and permanent
// neighbours for bpf_fib_lookup, and a runner for BPF_PROG_TEST_RUN.

package bpf

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/l4lb/l4lb/internal/testutil"
)

// Addresses of the FIB test namespace (198.18.0.0/15, 2001:db8::/32).
var (
	lbSrc4 = netip.MustParseAddr("198.18.0.1")
	lbSrc6 = netip.MustParseAddr("2001:db8::1")

	// Backends behind lb0 (the ingress interface): XDP_TX.
	be4Near = netip.MustParseAddr("198.18.0.11")
	be6Near = netip.MustParseAddr("2001:db8::11")
	macNear = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x11}
	// Backends behind lb1: XDP_REDIRECT to lb1.
	be4Far = netip.MustParseAddr("198.18.2.22")
	be6Far = netip.MustParseAddr("2001:db8:2::22")
	macFar = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x22}
	// On lb0's subnet but without a neighbour entry.
	be4NoNeigh = netip.MustParseAddr("198.18.0.99")
	// Without a route.
	be4NoRoute = netip.MustParseAddr("198.19.255.1")
)

// testOptions keep the maps small: tests load many balancers.
var testOptions = Options{ConntrackSize: 4096, MaxVIPs: 16, MaxBackends: 2048}

// newTestLB loads a balancer for t and closes it on cleanup.
func newTestLB(t testing.TB, opts Options) *LB {
	t.Helper()
	testutil.RequirePriv(t, "loads BPF programs")
	lb, err := Load(opts)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { lb.Close() })
	return lb
}

// fibNet is a namespace with two veth links for bpf_fib_lookup.
type fibNet struct {
	ns         *testutil.Netns
	lb0, lb1   int              // ifindexes
	mac0, mac1 net.HardwareAddr // their MACs: the FIB's source MACs
}

// newFibNet builds the namespace: lb0 (ingress) 198.18.0.1/24 and
// 2001:db8::1/64, lb1 198.18.2.1/24 and 2001:db8:2::1/64, forwarding on,
// permanent neighbours for the near and far backends.
func newFibNet(t testing.TB) *fibNet {
	t.Helper()
	ns := testutil.NewNetns(t, "bpf")
	testutil.Veth(t, ns, "lb0", "198.18.0.1/24", ns, "peer0", "")
	testutil.Veth(t, ns, "lb1", "198.18.2.1/24", ns, "peer1", "")
	for _, c := range [][]string{
		{"ip", "addr", "add", "2001:db8::1/64", "dev", "lb0", "nodad"},
		{"ip", "addr", "add", "2001:db8:2::1/64", "dev", "lb1", "nodad"},
		{"ip", "neigh", "replace", be4Near.String(), "lladdr", macNear.String(), "dev", "lb0", "nud", "permanent"},
		{"ip", "neigh", "replace", be6Near.String(), "lladdr", macNear.String(), "dev", "lb0", "nud", "permanent"},
		{"ip", "neigh", "replace", be4Far.String(), "lladdr", macFar.String(), "dev", "lb1", "nud", "permanent"},
		{"ip", "neigh", "replace", be6Far.String(), "lladdr", macFar.String(), "dev", "lb1", "nud", "permanent"},
	} {
		ns.MustExec(t, c...)
	}
	ns.MustDo(t, func() error { // /proc/sys/net is the calling thread's namespace's
		for _, f := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	n := &fibNet{ns: ns}
	ns.MustDo(t, func() error {
		for _, x := range []struct {
			name string
			idx  *int
			mac  *net.HardwareAddr
		}{{"lb0", &n.lb0, &n.mac0}, {"lb1", &n.lb1, &n.mac1}} {
			ifc, err := net.InterfaceByName(x.name)
			if err != nil {
				return err
			}
			*x.idx, *x.mac = ifc.Index, ifc.HardwareAddr
		}
		return nil
	})
	return n
}

// runner runs a program on frames, in a namespace when it has one (the
// FIB lookup uses the running thread's namespace).
type runner struct {
	prog    *ebpf.Program
	net     *fibNet // nil: run in the test's own namespace, no FIB context
	ingress int
}

// run runs the program once on frame and returns the verdict and the
// frame as the program left it.
func (r runner) run(t testing.TB, frame []byte) (uint32, []byte) {
	t.Helper()
	ret, out, err := r.try(frame)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return ret, out
}

// try is run without the test failure, for the fuzzer.
func (r runner) try(frame []byte) (uint32, []byte, error) {
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	if r.ingress != 0 {
		opts.Context = lbXdpMd{DataEnd: uint32(len(frame)), IngressIfindex: uint32(r.ingress)}
	}
	var ret uint32
	var err error
	do := func() error { ret, err = r.prog.Run(opts); return nil }
	if r.net != nil {
		if nerr := r.net.ns.Do(do); nerr != nil {
			return 0, nil, nerr
		}
	} else {
		do()
	}
	return ret, opts.DataOut, err
}
