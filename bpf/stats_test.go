// Stats: per-VIP, per-backend and global counters, summed over CPUs
// without allocating.

package bpf

import (
	"net/netip"
	"reflect"
	"runtime"
	"testing"

	"github.com/l4lb/l4lb/l4"
	"golang.org/x/sys/unix"
)

// TestStats: forwarded packets and bytes land on the VIP and the backend,
// new flows once per flow, drops on the VIP only.
func TestStats(t *testing.T) {
	lb := newTestLB(t, testOptions)
	r := runner{prog: lb.objs.XdpLb}
	addBackend(t, lb, 5, netip.MustParseAddr("198.18.0.55"))
	addVIP(t, lb, vip4UDP, 2, l4.ForwardL2, l4.HashSrcIPPort, []uint32{5})
	frame, _ := frameSpec{flow: flowTo(vip4UDP)}.build()
	for range 3 {
		if ret, _ := r.run(t, frame); ret != xdpTX {
			t.Fatalf("verdict %s", verdictName(ret))
		}
	}
	must(t, lb.SetMaglev(2, []uint32{0}))
	must(t, lb.DeleteBackend(5)) // the flow's backend is gone, the slot empty: drop
	r.run(t, frame)
	vs, err := lb.VIPStats(2)
	must(t, err)
	want := VIPStats{Packets: 3, Bytes: 3 * uint64(len(frame)), NewFlows: 1, Drops: 1}
	if vs != want {
		t.Errorf("vip stats %+v, want %+v", vs, want)
	}
	bs, err := lb.BackendStats(5)
	must(t, err)
	if wantB := (BackendStats{Packets: 3, Bytes: 3 * uint64(len(frame)), NewFlows: 1}); bs != wantB {
		t.Errorf("backend stats %+v, want %+v", bs, wantB)
	}
	g, err := lb.GlobalStats()
	must(t, err)
	if g[CounterTX] != 3 || g[CounterCTNew] != 1 || g[CounterCTHit] != 2 || g[CounterCTStale] != 1 || g[CounterDropNoBackend] != 1 {
		t.Errorf("global %v", nonZero(g))
	}
}

// TestStatsSumCPUs: packets run on each CPU in turn (the counters are
// per-CPU) are all counted.
func TestStatsSumCPUs(t *testing.T) {
	lb := newTestLB(t, testOptions)
	r := runner{prog: lb.objs.XdpLb}
	addBackend(t, lb, 1, netip.MustParseAddr("198.18.0.11"))
	addVIP(t, lb, vip4UDP, 0, l4.ForwardL2, l4.HashSrcIP, []uint32{1})
	frame, _ := frameSpec{flow: flowTo(vip4UDP)}.build()
	ncpu := runtime.NumCPU()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var orig unix.CPUSet
	must(t, unix.SchedGetaffinity(0, &orig))
	defer unix.SchedSetaffinity(0, &orig)
	for cpu := range ncpu {
		var set unix.CPUSet
		set.Set(cpu)
		must(t, unix.SchedSetaffinity(0, &set))
		r.run(t, frame)
	}
	vs, err := lb.VIPStats(0)
	must(t, err)
	g, err := lb.GlobalStats()
	must(t, err)
	if vs.Packets != uint64(ncpu) || g[CounterTX] != uint64(ncpu) {
		t.Fatalf("%d CPUs: vip packets %d, tx %d", ncpu, vs.Packets, g[CounterTX])
	}
}

// TestStatsDoNotAllocate: a metrics scrape reads counters without garbage.
func TestStatsDoNotAllocate(t *testing.T) {
	lb := newTestLB(t, testOptions)
	for name, fn := range map[string]func(){
		"vip":     func() { _, _ = lb.VIPStats(1) },
		"backend": func() { _, _ = lb.BackendStats(1) },
		"global":  func() { _, _ = lb.GlobalStats() },
	} {
		if a := testing.AllocsPerRun(100, fn); a != 0 {
			t.Errorf("%s stats: %.1f allocations per read", name, a)
		}
	}
}

// TestStatsOutOfRange: an index beyond the map is an error, not a panic.
func TestStatsOutOfRange(t *testing.T) {
	lb := newTestLB(t, testOptions)
	if _, err := lb.VIPStats(testOptions.MaxVIPs); err == nil {
		t.Error("vip stats beyond MaxVIPs: no error")
	}
}

// TestCounterTypesAreU64: sumInto reads the generated counter structs as
// u64 arrays; a field of any other type would be misread.
func TestCounterTypesAreU64(t *testing.T) {
	for _, v := range []any{lbVipCounters{}, lbBackendCounters{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Name != "_" && f.Type.Kind() != reflect.Uint64 {
				t.Errorf("%v.%s is %v, want uint64", typ, f.Name, f.Type)
			}
		}
	}
}

// TestCounterNames: every counter the C defines has a name.
func TestCounterNames(t *testing.T) {
	seen := map[string]bool{}
	for c := Counter(1); int(c) < NumCounters; c++ {
		n := counterNames[c]
		if n == "" || seen[n] {
			t.Errorf("counter %d: name %q missing or duplicated", c, n)
		}
		seen[n] = true
	}
}
