// The writers refuse what the program could not use, and round-trip what
// it can.

package bpf

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
)

// TestWritersValidate: out-of-range indices, unknown enums, wrong
// families and bad MACs are errors, and nothing is written.
func TestWritersValidate(t *testing.T) {
	lb := newTestLB(t, testOptions)
	a4 := netip.MustParseAddr("198.18.0.5")
	for name, err := range map[string]error{
		"vip index":          lb.SetVIP(vip4TCP, VIPEntry{Index: testOptions.MaxVIPs}),
		"vip hash key":       lb.SetVIP(vip4TCP, VIPEntry{HashKey: 7}),
		"vip forward":        lb.SetVIP(vip4TCP, VIPEntry{Forward: 9}),
		"vip protocol":       lb.SetVIP(l4.VIPKey{Addr: vip4TCP.Addr, Proto: 1}, VIPEntry{}),
		"vip address":        lb.SetVIP(l4.VIPKey{Proto: l4.TCP}, VIPEntry{}),
		"backend index 0":    lb.SetBackend(0, BackendEntry{Addr: a4}),
		"backend index max":  lb.SetBackend(testOptions.MaxBackends, BackendEntry{Addr: a4}),
		"backend address":    lb.SetBackend(1, BackendEntry{}),
		"backend mac":        lb.SetBackend(1, BackendEntry{Addr: a4, MAC: net.HardwareAddr{1, 2, 3}}),
		"table empty":        lb.SetMaglev(0, nil),
		"table vip index":    lb.SetMaglev(testOptions.MaxVIPs, []uint32{1}),
		"table backend":      lb.SetMaglev(0, []uint32{1, testOptions.MaxBackends}),
		"table too big":      lb.SetMaglev(0, make([]uint32, balance.MaxMaglevSize+1)),
		"source v4 family":   lb.SetSource(netip.MustParseAddr("2001:db8::1"), netip.Addr{}),
		"source v6 family":   lb.SetSource(netip.Addr{}, a4),
		"source v6 as 4in6":  lb.SetSource(netip.Addr{}, netip.AddrFrom16(a4.As16())),
		"delete missing vip": lb.DeleteVIP(vip6UDP),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := lb.LookupVIP(vip4TCP); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused SetVIP wrote: %v", err)
	}
	if _, err := lb.MaglevTable(0); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused SetMaglev wrote: %v", err)
	}
	if _, err := Load(Options{MaxBackends: 1}); err == nil {
		t.Error("MaxBackends 1 accepted")
	}
}

// TestWritersRoundTrip: what is written reads back; DeleteVIP removes the
// table too; a 4-in-6 mapped VIP address is the same VIP as plain IPv4.
func TestWritersRoundTrip(t *testing.T) {
	lb := newTestLB(t, testOptions)
	e := VIPEntry{Index: 9, HashKey: l4.HashSrcIPPort, Forward: l4.ForwardL2}
	must(t, lb.SetVIP(vip4UDP, e))
	mapped := l4.VIPKey{Addr: netip.AddrPortFrom(netip.AddrFrom16(vip4UDP.Addr.Addr().As16()), 53), Proto: l4.UDP}
	if got, err := lb.LookupVIP(mapped); err != nil || got != e {
		t.Fatalf("lookup %+v %v, want %+v", got, err, e)
	}
	table := []uint32{3, 0, 7, 7, 1}
	must(t, lb.SetMaglev(9, table))
	got, err := lb.MaglevTable(9)
	must(t, err)
	if len(got) != len(table) {
		t.Fatalf("table %v, want %v", got, table)
	}
	for i := range got {
		if got[i] != table[i] {
			t.Fatalf("table %v, want %v", got, table)
		}
	}
	must(t, lb.DeleteVIP(vip4UDP))
	if _, err := lb.MaglevTable(9); !errors.Is(err, ErrNotFound) {
		t.Fatalf("table after DeleteVIP: %v", err)
	}
	if _, err := lb.LookupVIP(vip4UDP); !errors.Is(err, ErrNotFound) {
		t.Fatalf("vip after DeleteVIP: %v", err)
	}
}

// TestMaglevSwapUnderLoad: packets running while tables of different
// sizes are swapped see one complete table or the other, with its own
// size: every packet goes to A (65537 slots) or B (1009 slots). A size
// out of step with its table would index past the small one and drop.
func TestMaglevSwapUnderLoad(t *testing.T) {
	lb := newTestLB(t, testOptions)
	addBackend(t, lb, 1, netip.MustParseAddr("198.18.0.11"))
	addBackend(t, lb, 2, netip.MustParseAddr("198.18.0.12"))
	tables := [2][]uint32{make([]uint32, 65537), make([]uint32, 1009)}
	for i, tab := range tables {
		for s := range tab {
			tab[s] = uint32(i + 1)
		}
	}
	addVIP(t, lb, vip4TCP, 0, l4.ForwardL2, l4.HashFiveTuple, tables[0])
	done := make(chan error)
	go func() {
		var err error
		for i := range 20 {
			if err = lb.SetMaglev(0, tables[i%2]); err != nil {
				break
			}
		}
		done <- err
	}()
	r := runner{prog: lb.objs.XdpLb}
	seen := map[uint32]int{}
	for i := 0; ; i++ {
		select {
		case err := <-done:
			must(t, err)
			t.Logf("%d packets during 20 swaps: %v", i, seen)
			if seen[0] != 0 {
				t.Fatal("packets dropped during swaps")
			}
			return
		default:
		}
		f := flowTo(vip4TCP)
		f.Src = netip.AddrPortFrom(f.Src.Addr(), uint16(i))
		frame, _ := frameSpec{flow: f, flags: thSYN}.build()
		ret, out := r.run(t, frame)
		if ret != xdpTX {
			seen[0]++
			continue
		}
		seen[indexOfMAC(out[:6])]++
	}
}

// Backends and VIPs list what was written, so a restarted control plane
// can give each backend address its old index.
func TestListEntries(t *testing.T) {
	lb := newTestLB(t, testOptions)
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 7}
	want := map[uint32]BackendEntry{
		3: {Addr: netip.MustParseAddr("198.18.1.3"), Active: true},
		7: {Addr: netip.MustParseAddr("2001:db8::7"), MAC: mac},
		9: {Addr: netip.MustParseAddr("198.18.1.9"), Active: true},
	}
	for i, e := range want {
		must(t, lb.SetBackend(i, e))
	}
	must(t, lb.DeleteBackend(9))
	delete(want, 9)
	got := map[uint32]BackendEntry{}
	must(t, lb.Backends(func(i uint32, e BackendEntry) bool { got[i] = e; return true }))
	if len(got) != len(want) {
		t.Fatalf("backends %v, want %v", got, want)
	}
	for i, e := range want {
		g := got[i]
		if g.Addr != e.Addr || g.Active != e.Active || g.MAC.String() != e.MAC.String() {
			t.Fatalf("backend %d = %+v, want %+v", i, g, e)
		}
	}
	e := VIPEntry{Index: 4, HashKey: l4.HashSrcIP, Forward: l4.ForwardIPIP}
	must(t, lb.SetVIP(vip4UDP, e))
	var vips []l4.VIPKey
	must(t, lb.VIPs(func(k l4.VIPKey, v VIPEntry) bool {
		if v != e {
			t.Errorf("vip %v = %+v, want %+v", k, v, e)
		}
		vips = append(vips, k)
		return true
	}))
	if len(vips) != 1 || vips[0] != vip4UDP {
		t.Fatalf("vips %v, want [%v]", vips, vip4UDP)
	}
}
