package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// results holds every value of every metric of every benchmark.
type results map[string]map[string][]float64 // name -> unit -> values

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader) (results, error) {
	res := results{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		fields := strings.Fields(m[3])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			if res[m[1]] == nil {
				res[m[1]] = map[string][]float64{}
			}
			res[m[1]][fields[i+1]] = append(res[m[1]][fields[i+1]], v)
		}
	}
	return res, sc.Err()
}

// median of vs (0 for none).
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r results) get(name, unit string) (float64, int) {
	vs := r[name][unit]
	return median(vs), len(vs)
}

func main() {
	cmd := flag.String("cmd", "", "the command that produced the input, for the report")
	flag.Parse()
	res, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdpreport:", err)
		os.Exit(1)
	}
	if len(res) == 0 {
		fmt.Fprintln(os.Stderr, "xdpreport: no benchmark lines on stdin")
		os.Exit(1)
	}
	w := os.Stdout
	fmt.Fprintf(w, "# XDP fast path: benchmarks\n\nProduced by `%s`; every figure is a median over the runs shown.\n", *cmd)
	endToEnd(w, res)
	perPacket(w, res)
}

// endToEnd prints the xdp and proxy paths against direct.
func endToEnd(w io.Writer, res results) {
	const prefix = "BenchmarkXDPDataPath/"
	fmt.Fprintf(w, "\n## End to end (one-arm DSR network in namespaces, 16 flows or dialers in parallel)\n\n")
	fmt.Fprintln(w, "| workload | direct | xdp | proxy | balancer's own CPU per op: xdp / proxy | ratio | whole-machine CPU per op over direct: xdp / proxy | ratio | runs |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, wl := range []struct{ name, unit string }{{"udp_rr", "req/s"}, {"tcp_conn", "conn/s"}} {
		rate := func(path string) float64 {
			ns, _ := res.get(prefix+wl.name+"/"+path, "ns/op")
			if ns == 0 {
				return 0
			}
			return 1e9 / ns
		}
		metric := func(path, unit string) float64 { v, _ := res.get(prefix+wl.name+"/"+path, unit); return v }
		direct, xdp, proxy := rate("direct"), rate("xdp"), rate("proxy")
		if direct == 0 {
			continue
		}
		lx, lp := metric("xdp", "lb-us/op"), metric("proxy", "lb-us/op")
		cx, cp := metric("xdp", "cpu-us/op")-metric("direct", "cpu-us/op"), metric("proxy", "cpu-us/op")-metric("direct", "cpu-us/op")
		_, runs := res.get(prefix+wl.name+"/xdp", "ns/op")
		fmt.Fprintf(w, "| %s | %.0f %s | %.0f (%.2fx direct, %.2fx proxy) | %.0f (%.2fx direct) | %.2f / %.1f µs | %s | %.1f / %.1f µs | %s | %d |\n",
			wl.name, direct, wl.unit, xdp, xdp/direct, xdp/proxy, proxy, proxy/direct, lx, lp, ratio(lp, lx, 0.01), cx, cp, ratio(cp, cx, 0.5), runs)
	}
	fmt.Fprintln(w, "\n- **Balancer's own CPU**: the l4lb process's user and system time plus the XDP program's run time (kernel BPF")
	fmt.Fprintln(w, "  stats), per request or connection. It leaves out the kernel's receive work in softirq on both paths (TCP/UDP input")
	fmt.Fprintln(w, "  for the proxy's sockets; the veth driver for XDP).")
	fmt.Fprintln(w, "- **Whole-machine CPU over direct**: the machine's busy CPU time per op on the path minus on the direct path; client and")
	fmt.Fprintln(w, "  backends do the same work on every path. It includes the softirq work, the test network's extra veth and bridge hop")
	fmt.Fprintln(w, "  through the balancer (a copy per packet into an XDP frame on veth, which a NIC driver does not make) and second-order")
	fmt.Fprintln(w, "  effects in the load generator; differences within about a microsecond are noise on these VMs.")
}

// ratio prints a/b, or "> a/floor" when b is below floor (the noise).
func ratio(a, b, floor float64) string {
	if b < floor {
		return fmt.Sprintf("> %.0fx", a/floor)
	}
	return fmt.Sprintf("%.1fx", a/b)
}

// perPacket prints the BPF_PROG_TEST_RUN benchmarks of the programs.
func perPacket(w io.Writer, res results) {
	var names []string
	for n := range res {
		if strings.HasPrefix(n, "BenchmarkXDPLB/") || strings.HasPrefix(n, "BenchmarkXDPDecap") || n == "BenchmarkTimer" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\n## Per packet (BPF_PROG_TEST_RUN, timed by the kernel)\n\n")
	fmt.Fprintln(w, "| benchmark | ns/pkt | ns/pkt-net | runs |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, n := range names {
		pkt, runs := res.get(n, "ns/pkt")
		net, _ := res.get(n, "ns/pkt-net")
		netText := "-"
		if net > 0 {
			netText = fmt.Sprintf("%.0f", net)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %d |\n", strings.TrimPrefix(n, "Benchmark"), pkt, netText, runs)
	}
	fmt.Fprintln(w, "\n`once` paths run one packet per BPF_PROG_TEST_RUN call (they change the packet or need a fresh flow); their ns/pkt")
	fmt.Fprintln(w, "includes the test-run timer's own cost (BenchmarkTimer, an empty program), which ns/pkt-net subtracts.")
}
