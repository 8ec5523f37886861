// The XDP fast path against the proxy and against no balancer, end to end
// in the one-arm DSR network:
//
//	go test ./cmd/l4lb -run '^$' -bench XDPDataPath -benchtime 3s -count 5
//
// Each run of BenchmarkXDPDataPath builds the network, starts one l4lb
// (built without the race detector) with the same backends behind an xdp
// VIP and a proxy VIP, and measures, path after path in one run:
//
//	udp_rr/{direct,xdp,proxy}    one 32-byte datagram and its echo, 16 flows in parallel
//	tcp_conn/{direct,xdp,proxy}  connect, read the backend's greeting, close; 16 in parallel
//
// ns/op gives the request or connection rate (1e9/ns per second). Two CPU
// figures per op:
//
//	lb-us/op   what the balancer itself spends: the l4lb process's CPU time
//	           (user and system, /proc/PID/stat) plus the XDP program's own
//	           run time (kernel BPF stats). Neither includes the kernel's
//	           receive work in softirq (TCP/UDP input for the proxy's
//	           sockets, the veth driver for XDP).
//	cpu-us/op  the whole machine's busy CPU time (/proc/stat): client and
//	           backends do the same work on every path, so a path's figure
//	           minus direct's is the whole cost of going through the
//	           balancer, softirq included, but also second-order effects in
//	           the test process (more goroutine wake-ups at higher latency).
//
// scripts/bench/xdpreport prints medians, rates and ratios.

package main

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// benchBinary is l4lb built without the race detector, on purpose and
// only for what the race detector would falsify or cannot fit: the
// benchmarks here and TestUpgradeHandoverScale (timings),
// TestWebSocketHoldDrainReloadKill (5000 held connections under an RSS
// bound the detector's shadow memory alone exceeds). Every other test
// runs the race-enabled build (buildBinary, TestDaemonBuiltWithRace).
var benchBinary = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "l4lb")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, nil
})

const (
	benchUDPPort  = 9000
	benchTCPPort  = 9001
	benchParallel = 16
)

func BenchmarkXDPDataPath(b *testing.B) {
	n := newXDPNet(b, 3)
	be := n.Backends[0]
	for _, h := range n.Backends {
		for _, a := range []netip.Addr{n.VIP4, h.Addr4} { // the VIP for DSR, its own address for direct and proxy
			n.ServeUDP(b, h, netip.AddrPortFrom(a, benchUDPPort))
			n.ServeTCP(b, h, netip.AddrPortFrom(a, benchTCPPort), greetAndClose(h.Name))
		}
	}
	bin, err := benchBinary()
	if err != nil {
		b.Fatal(err)
	}
	lb := startBinaryIn(b, n.LB.NS, bin, benchConfig(n))
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable BPF run-time stats: %v", err)
	}
	b.Cleanup(func() { stats.Close() })
	cost := balancerCost{pid: lb.cmd.Process.Pid, prog: xdpProgram(b, n)}
	paths := []struct {
		name     string
		udp, tcp netip.AddrPort
	}{
		{"direct", netip.AddrPortFrom(be.Addr4, benchUDPPort), netip.AddrPortFrom(be.Addr4, benchTCPPort)},
		{"xdp", netip.AddrPortFrom(n.VIP4, benchUDPPort), netip.AddrPortFrom(n.VIP4, benchTCPPort)},
		{"proxy", netip.AddrPortFrom(n.LB.Addr4, benchUDPPort), netip.AddrPortFrom(n.LB.Addr4, benchTCPPort)},
	}
	for _, p := range paths {
		b.Run("udp_rr/"+p.name, func(b *testing.B) { benchUDP(b, n, p.udp, &cost) })
	}
	for _, p := range paths {
		b.Run("tcp_conn/"+p.name, func(b *testing.B) { benchTCPConn(b, n, p.tcp, &cost) })
	}
}

// greetAndClose writes name and closes: the server closes first, so
// TIME_WAIT stays on the backends and the client's ports do not run out.
func greetAndClose(name string) func(net.Conn) {
	greeting := []byte(name + "\n")
	return func(c net.Conn) { _, _ = c.Write(greeting) }
}

// benchConfig has an xdp VIP and a proxy VIP per protocol over the same
// three backends.
func benchConfig(n *xdpNet) string {
	var xdp, proxy strings.Builder
	for _, h := range n.Backends {
		fmt.Fprintf(&xdp, "  [[vip.backend]]\n  address = \"%s:PORT\"\n", h.Addr4)
		fmt.Fprintf(&proxy, "  [[vip.backend]]\n  address = \"%s:PORT\"\n", h.Addr4)
	}
	vip := func(name, listen, proto, mode, backends string, port int) string {
		return fmt.Sprintf("[[vip]]\nname = %q\nlisten = \"%s:%d\"\nprotocol = %q\nmode = %q\n  [vip.health]\n  type = \"none\"\n%s",
			name, listen, port, proto, mode, strings.ReplaceAll(backends, "PORT", strconv.Itoa(port)))
	}
	return fmt.Sprintf("[global]\nadmin_socket = \"@ADMIN@\"\n[xdp]\ninterface = %q\n", n.LB.Link) +
		vip("xdp-udp", n.VIP4.String(), "udp", "xdp", xdp.String(), benchUDPPort) +
		vip("xdp-tcp", n.VIP4.String(), "tcp", "xdp", xdp.String(), benchTCPPort) +
		vip("proxy-udp", n.LB.Addr4.String(), "udp", "proxy", proxy.String(), benchUDPPort) +
		vip("proxy-tcp", n.LB.Addr4.String(), "tcp", "proxy", proxy.String(), benchTCPPort)
}

// benchUDP: each parallel worker has its own flow (a connected socket) and
// one datagram in flight.
func benchUDP(b *testing.B, n *xdpNet, addr netip.AddrPort, cost *balancerCost) {
	socks := make(chan *net.UDPConn, benchParallel)
	for range benchParallel {
		socks <- n.DialUDP(b, addr)
	}
	measureCPU(b, cost, func() {
		b.SetParallelism((benchParallel + 1) / 2) // x GOMAXPROCS (2) workers
		b.RunParallel(func(pb *testing.PB) {
			c := <-socks
			msg, buf := []byte("0123456789abcdef0123456789abcdef"), make([]byte, 256)
			for pb.Next() {
				c.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Write(msg); err != nil {
					b.Error(err)
					return
				}
				if _, err := c.Read(buf); err != nil {
					b.Errorf("udp %s: %v", addr, err)
					return
				}
			}
		})
	})
}

// benchTCPConn: each op is one connection: connect, the greeting, close.
// Every worker dials from its own OS thread switched into the client's
// namespace (a socket is made in its creating thread's namespace).
func benchTCPConn(b *testing.B, n *xdpNet, addr netip.AddrPort, cost *balancerCost) {
	d := net.Dialer{Timeout: 2 * time.Second}
	measureCPU(b, cost, func() {
		b.SetParallelism((benchParallel + 1) / 2)
		b.RunParallel(func(pb *testing.PB) {
			n.InNS(b, n.Client.NS, func() {
				for pb.Next() {
					c, err := d.Dial("tcp4", addr.String())
					if err != nil {
						b.Errorf("tcp %s: %v", addr, err)
						return
					}
					c.SetDeadline(time.Now().Add(2 * time.Second))
					if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
						b.Errorf("tcp %s: greeting: %v", addr, err)
					}
					c.Close()
				}
			})
		})
	})
}

// measureCPU runs fn and reports the machine's and the balancer's CPU
// time per op.
func measureCPU(b *testing.B, cost *balancerCost, fn func()) {
	machine, lb := machineCPU(b), cost.read(b)
	b.ResetTimer()
	fn()
	b.StopTimer()
	b.ReportMetric(float64((machineCPU(b)-machine).Nanoseconds())/1e3/float64(b.N), "cpu-us/op")
	b.ReportMetric(float64((cost.read(b)-lb).Nanoseconds())/1e3/float64(b.N), "lb-us/op")
}

// balancerCost reads what the balancer has spent: its process's CPU time
// and its XDP program's run time.
type balancerCost struct {
	pid  int
	prog *ebpf.Program
}

func (c *balancerCost) read(b testing.TB) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.pid))
	if err != nil {
		b.Fatal(err)
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64) // stat fields 14 and 15
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	st, err := c.prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(utime+stime)*time.Second/100 + st.Runtime
}

// xdpProgram opens the XDP program attached to the balancer's veth.
func xdpProgram(b testing.TB, n *xdpNet) *ebpf.Program {
	var id uint32
	n.LB.NS.MustDo(b, func() error {
		l, err := netlink.LinkByName(n.LB.Link)
		if err != nil {
			return err
		}
		if l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached {
			return fmt.Errorf("no XDP program on %s", n.LB.Link)
		}
		id = l.Attrs().Xdp.ProgId
		return nil
	})
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// machineCPU is the busy CPU time of all CPUs (every /proc/stat field but
// idle and iowait).
func machineCPU(b testing.TB) time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	var busy int64
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return time.Duration(busy) * time.Second / 100 // USER_HZ
}
