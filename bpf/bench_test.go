// Per-packet cost of the programs, timed by the kernel (BPF_PROG_TEST_RUN).
//
// Timing: BPF_PROG_TEST_RUN with Repeat runs the program again and again
// on one buffer without resetting it, so after a bpf_xdp_adjust_head the
// next run sees the mutated (encapsulated or decapsulated) frame and times
// another path. Two ways around it, both reported:
//   - paths that leave the parsed bytes alone (l2 forwarding rewrites only
//     MACs) run with Repeat = b.N: the kernel's mean is the cost;
//   - mutating paths (ipip, decap, and new flows, which need a fresh key
//     every time) run Repeat = 1 per syscall, and the metric is the median
//     of the kernel's per-run durations. That includes the test-run timer's
//     own overhead (two ktime reads, RCU and migration toggles), so the same
//     loop over an empty program is reported as "timer" and subtracted in
//     "ns/pkt-net". A single duration is quantized (about 10 ns on these
//     VMs), and so is their median; the interquartile mean (the mean of the
//     middle half, "ns/pkt-iqm", net of the timer's own in "ns/pkt-iqm-net")
//     is not, and drops the outliers a plain mean would keep.
//
// go test -run XXX -bench . -count 5 ./bpf/

package bpf

import (
	"encoding/binary"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// benchLB is a balancer with one VIP per family and protocol on a
// 65537-slot table over 100 backends (odd indexes IPv4, even IPv6), in
// the FIB namespace, with the next hops the control plane would write.
func benchLB(b *testing.B, fwd l4.Forward) (*LB, *fibNet) {
	return benchLBOn(b, fwd, func(s int) uint32 { return uint32(s%100 + 1) })
}

// benchLBOn is benchLB with slot s of every table naming backend slot(s).
func benchLBOn(b *testing.B, fwd l4.Forward, slot func(s int) uint32) (*LB, *fibNet) {
	lb := newTestLB(b, Options{ConntrackSize: 1 << 20, MaxVIPs: 16, MaxBackends: 256})
	fn := newFibNet(b)
	must(b, lb.SetSource(lbSrc4, lbSrc6))
	for i := uint32(1); i <= 100; i++ {
		a := be4Near
		if i%2 == 0 {
			a = be6Near
		}
		addBackend(b, lb, i, a)
	}
	table := make([]uint32, 65537)
	for s := range table {
		table[s] = slot(s)
	}
	for i, v := range vips {
		addVIP(b, lb, v, uint32(i), fwd, l4.HashFiveTuple, table)
	}
	benchNextHops(b, lb, fn, 100)
	return lb, fn
}

// enterNetns moves the benchmark goroutine's (locked) thread into ns for
// the rest of the benchmark.
func enterNetns(b *testing.B, ns *testutil.Netns) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	must(b, err)
	target, err := netns.GetFromName(ns.Name)
	must(b, err)
	must(b, netns.Set(target))
	b.Cleanup(func() {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread() // else the thread dies with the goroutine
		}
		orig.Close()
		target.Close()
	})
}

// repeatMean runs frame b.N times in one syscall and reports the kernel's
// mean per run.
func repeatMean(b *testing.B, prog *ebpf.Program, frame []byte, want uint32) {
	b.ResetTimer()
	ret, d, err := prog.Benchmark(frame, b.N, b.ResetTimer)
	must(b, err)
	if ret != want {
		b.Fatalf("verdict %s", verdictName(ret))
	}
	b.ReportMetric(float64(d.Nanoseconds()), "ns/pkt")
}

// onceMedian runs prog b.N times with Repeat = 1 on the frame next(i)
// returns and reports the median and the interquartile mean of the
// kernel's per-run durations, each also net of the timer's.
func onceMedian(b *testing.B, prog *ebpf.Program, ingress int, next func(i int) []byte, want uint32, timer onceTime) {
	ds := make([]int64, 0, b.N)
	opts := ebpf.RunOptions{Repeat: 1}
	b.ResetTimer()
	for i := range b.N {
		opts.Data = next(i)
		opts.DataOut = make([]byte, len(opts.Data)+64)
		if ingress != 0 {
			opts.Context = lbXdpMd{DataEnd: uint32(len(opts.Data)), IngressIfindex: uint32(ingress)}
		}
		ret, d, err := runTimed(prog, &opts)
		if err != nil || ret != want {
			b.Fatalf("run %d: %s %v", i, verdictName(ret), err)
		}
		ds = append(ds, d)
	}
	t := onceStats(ds)
	b.ReportMetric(t.med, "ns/pkt")
	b.ReportMetric(t.iqm, "ns/pkt-iqm")
	if timer.med > 0 {
		b.ReportMetric(t.med-timer.med, "ns/pkt-net")
		b.ReportMetric(t.iqm-timer.iqm, "ns/pkt-iqm-net")
	}
}

// onceTime is a set of Repeat=1 durations summed up: their median and
// their interquartile mean (the mean of the middle half).
type onceTime struct{ med, iqm float64 }

// onceStats sorts ds and sums it up.
func onceStats(ds []int64) onceTime {
	slices.Sort(ds)
	lo, hi := len(ds)/4, len(ds)-len(ds)/4
	var sum int64
	for _, d := range ds[lo:hi] {
		sum += d
	}
	return onceTime{med: float64(ds[len(ds)/2]), iqm: float64(sum) / float64(hi-lo)}
}

// runTimed runs prog once and returns the kernel's duration. With a
// context it issues BPF_PROG_TEST_RUN itself: Program.Benchmark takes no
// context, and Program.Run returns no duration.
func runTimed(prog *ebpf.Program, opts *ebpf.RunOptions) (uint32, int64, error) {
	if opts.Context == nil {
		ret, d, err := prog.Benchmark(opts.Data, 1, nil)
		return ret, d.Nanoseconds(), err
	}
	ctx, err := binary.Append(nil, binary.NativeEndian, opts.Context)
	if err != nil {
		return 0, 0, err
	}
	attr := testRunAttr{
		progFD: uint32(prog.FD()), dataSizeIn: uint32(len(opts.Data)), dataSizeOut: uint32(len(opts.DataOut)),
		dataIn: unsafe.Pointer(&opts.Data[0]), dataOut: unsafe.Pointer(&opts.DataOut[0]), repeat: 1,
		ctxSizeIn: uint32(len(ctx)), ctxIn: unsafe.Pointer(&ctx[0]),
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, 10 /* BPF_PROG_TEST_RUN */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return 0, 0, errno
	}
	return attr.retval, int64(attr.duration), nil
}

// testRunAttr is the BPF_PROG_TEST_RUN part of union bpf_attr.
type testRunAttr struct {
	progFD, retval, dataSizeIn, dataSizeOut uint32
	dataIn, dataOut                         unsafe.Pointer
	repeat, duration, ctxSizeIn, ctxSizeOut uint32
	ctxIn, ctxOut                           unsafe.Pointer
	flags, cpu, batchSize, _                uint32
}

// emptyTimer is the Repeat=1 duration of a program that only returns
// XDP_PASS: the timer overhead in every onceMedian figure.
func emptyTimer(b *testing.B) onceTime {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
	})
	must(b, err)
	defer prog.Close()
	frame, _ := frameSpec{flow: flowTo(vip4TCP)}.build()
	ds := make([]int64, 2001)
	for i := range ds {
		_, d, err := prog.Benchmark(frame, 1, nil)
		must(b, err)
		ds[i] = d.Nanoseconds()
	}
	return onceStats(ds)
}

// BenchmarkTimer is the Repeat=1 overhead of an empty XDP program.
func BenchmarkTimer(b *testing.B) {
	testutil.RequirePriv(b, "runs BPF programs")
	t := emptyTimer(b)
	b.ReportMetric(t.med, "ns/pkt")
	b.ReportMetric(t.iqm, "ns/pkt-iqm")
}

// withPort returns frame with the TCP/UDP source port (and, beyond 65535
// flows, the client address's low bytes) made unique for i. Checksums are
// not fixed: the program does not read them.
func withPort(frame []byte, l3 int, v6 bool, i int) []byte {
	out := append([]byte{}, frame...)
	ipHdr, addrEnd := 20, l3+16
	if v6 {
		ipHdr, addrEnd = 40, l3+24
	}
	binary.BigEndian.PutUint16(out[l3+ipHdr:], uint16(i))
	binary.BigEndian.PutUint16(out[addrEnd-2:], uint16(i>>16))
	return out
}

// BenchmarkXDPLB times the balancer's paths per family.
func BenchmarkXDPLB(b *testing.B) {
	testutil.RequirePriv(b, "runs BPF programs")
	timer := emptyTimer(b)
	for _, v := range []struct {
		name string
		vip  netip.AddrPort
	}{{"ipv4", vip4TCP.Addr}, {"ipv6", vip6TCP.Addr}} {
		vk := vip4TCP
		if v.vip.Addr().Is6() {
			vk = vip6TCP
		}
		ack, ip := frameSpec{flow: flowTo(vk), flags: thACK}.build()
		syn, _ := frameSpec{flow: flowTo(vk), flags: thSYN}.build()
		l3 := len(ack) - len(ip)
		v6 := v.vip.Addr().Is6()

		b.Run(v.name+"/hit/l2/repeat", func(b *testing.B) {
			lb, _ := benchLB(b, l4.ForwardL2)
			runner{prog: lb.objs.XdpLb}.run(b, syn)
			repeatMean(b, lb.objs.XdpLb, ack, xdpTX)
		})
		b.Run(v.name+"/hit/l2/repeat/acl", func(b *testing.B) {
			lb, _ := benchLB(b, l4.ForwardL2)
			benchACL(b, lb, vk)
			runner{prog: lb.objs.XdpLb}.run(b, syn)
			repeatMean(b, lb.objs.XdpLb, ack, xdpTX)
		})
		b.Run(v.name+"/syn-rehash/l2/repeat/syn-rate", func(b *testing.B) {
			lb, _ := benchLB(b, l4.ForwardL2)
			must(b, lb.SetSYNRate(10_000_000)) // never reached: times the state update
			repeatMean(b, lb.objs.XdpLb, syn, xdpTX)
		})
		b.Run(v.name+"/syn-rehash/l2/repeat", func(b *testing.B) {
			lb, _ := benchLB(b, l4.ForwardL2)
			repeatMean(b, lb.objs.XdpLb, syn, xdpTX)
		})
		b.Run(v.name+"/hit/l2/once", func(b *testing.B) {
			lb, _ := benchLB(b, l4.ForwardL2)
			runner{prog: lb.objs.XdpLb}.run(b, syn)
			onceMedian(b, lb.objs.XdpLb, 0, func(int) []byte { return ack }, xdpTX, timer)
		})
		b.Run(v.name+"/new/l2/once", func(b *testing.B) {
			lb, _ := benchLB(b, l4.ForwardL2)
			onceMedian(b, lb.objs.XdpLb, 0, func(i int) []byte { return withPort(ack, l3, v6, i) }, xdpTX, timer)
		})
		b.Run(v.name+"/hit/ipip/once", func(b *testing.B) {
			lb, fn := benchLB(b, l4.ForwardIPIP)
			enterNetns(b, fn.ns)
			onceMedian(b, lb.objs.XdpLb, fn.lb0, func(int) []byte { return ack }, xdpTX, timer)
		})
		b.Run(v.name+"/new/ipip/once", func(b *testing.B) {
			lb, fn := benchLB(b, l4.ForwardIPIP)
			enterNetns(b, fn.ns)
			onceMedian(b, lb.objs.XdpLb, fn.lb0, func(i int) []byte { return withPort(ack, l3, v6, i) }, xdpTX, timer)
		})
		for _, be := range []struct {
			name string
			idx  uint32
		}{{"be4", 1}, {"be6", 2}} {
			b.Run(v.name+"/hit/ipip-"+be.name+"/once", func(b *testing.B) {
				lb, fn := benchLBOn(b, l4.ForwardIPIP, func(int) uint32 { return be.idx })
				enterNetns(b, fn.ns)
				onceMedian(b, lb.objs.XdpLb, fn.lb0, func(int) []byte { return ack }, xdpTX, timer)
			})
			b.Run(v.name+"/new/ipip-"+be.name+"/once", func(b *testing.B) {
				lb, fn := benchLBOn(b, l4.ForwardIPIP, func(int) uint32 { return be.idx })
				enterNetns(b, fn.ns)
				onceMedian(b, lb.objs.XdpLb, fn.lb0, func(i int) []byte { return withPort(ack, l3, v6, i) }, xdpTX, timer)
			})
		}
		b.Run(v.name+"/not-vip/repeat", func(b *testing.B) {
			lb, _ := benchLB(b, l4.ForwardL2)
			other := append([]byte{}, ack...)
			dport := l3 + 20 + 2
			if v6 {
				dport = l3 + 40 + 2
			}
			binary.BigEndian.PutUint16(other[dport:], 22) // SSH: not a VIP
			repeatMean(b, lb.objs.XdpLb, other, xdpPass)
		})
	}
}

// benchACL gives vk an access list of 256 denied networks of both
// families around an allowed /16 that holds the test client.
func benchACL(b *testing.B, lb *LB, vk l4.VIPKey) {
	var deny []netip.Prefix
	for i := range 128 {
		deny = append(deny, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16),
			netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0xff, byte(i)}), 48))
	}
	allow := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::/32")}
	acl, err := guard.NewACL(allow, deny)
	must(b, err)
	must(b, lb.SetVIP(vk, VIPEntry{Index: uint32(slices.Index(vips, vk)), Forward: l4.ForwardL2, HashKey: l4.HashFiveTuple, ACL: acl}))
}

// BenchmarkXDPDecap times stripping the outer header (Repeat = 1: a
// repeated run would see the already-decapsulated frame).
func BenchmarkXDPDecap(b *testing.B) {
	timer := emptyTimer(b)
	objs := testDecap(b)
	frame, ip := frameSpec{flow: flowTo(vip4TCP), flags: thACK}.build()
	in := encapsulated(frame, 14, len(ip), lbSrc4, be4Near, macNear, macLB)
	onceMedian(b, objs.XdpDecap, 0, func(int) []byte { return in }, xdpPass, timer)
}
