// Small helpers shared by the tests.

package bpf

import (
	"bytes"
	"encoding/hex"
	"net"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// XDP verdicts.
const (
	xdpAborted  = 0
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

func verdictName(v uint32) string {
	return [...]string{"ABORTED", "DROP", "PASS", "TX", "REDIRECT", "?"}[min(v, 5)]
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Test VIPs.
var (
	vip4TCP = l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.100.1:80"), Proto: l4.TCP}
	vip4UDP = l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.100.1:53"), Proto: l4.UDP}
	vip6TCP = l4.VIPKey{Addr: netip.MustParseAddrPort("[2001:db8:100::1]:443"), Proto: l4.TCP}
	vip6UDP = l4.VIPKey{Addr: netip.MustParseAddrPort("[2001:db8:100::1]:53"), Proto: l4.UDP}

	client4 = netip.MustParseAddrPort("198.18.50.5:40000")
	client6 = netip.MustParseAddrPort("[2001:db8:50::5]:40000")
)

// clientFor is a client of the VIP's family.
func clientFor(v l4.VIPKey) netip.AddrPort {
	if v.Addr.Addr().Is4() {
		return client4
	}
	return client6
}

// flowTo is the test client's flow to v.
func flowTo(v l4.VIPKey) l4.Flow { return l4.Flow{Src: clientFor(v), Dst: v.Addr, Proto: v.Proto} }

// macFor is a MAC that encodes backend index i.
func macFor(i uint32) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0xbe, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}
}

// indexOfMAC decodes macFor.
func indexOfMAC(m []byte) uint32 {
	return uint32(m[2])<<24 | uint32(m[3])<<16 | uint32(m[4])<<8 | uint32(m[5])
}

// addVIP configures v at index with one table for all of it.
func addVIP(t testing.TB, lb *LB, v l4.VIPKey, index uint32, fwd l4.Forward, key l4.HashKey, table []uint32) {
	t.Helper()
	must(t, lb.SetVIP(v, VIPEntry{Index: index, HashKey: key, Forward: fwd}))
	must(t, lb.SetMaglev(index, table))
}

// addBackend adds an active backend at i with macFor(i) unless mac is set.
func addBackend(t testing.TB, lb *LB, i uint32, a netip.Addr) {
	t.Helper()
	must(t, lb.SetBackend(i, BackendEntry{Addr: a, MAC: macFor(i), Active: true}))
}

// counterDelta returns the counters' change across fn.
func counterDelta(t testing.TB, lb *LB, fn func()) Counters {
	t.Helper()
	before, err := lb.GlobalStats()
	must(t, err)
	fn()
	after, err := lb.GlobalStats()
	must(t, err)
	for i := range after {
		after[i] -= before[i]
	}
	return after
}

// onlyCounters checks that exactly the named counters moved by one.
func onlyCounters(t testing.TB, d Counters, want ...Counter) {
	t.Helper()
	var w Counters
	for _, c := range want {
		w[c]++
	}
	if d != w {
		t.Errorf("counters moved %v, want %v", nonZero(d), nonZero(w))
	}
}

func nonZero(c Counters) map[string]uint64 {
	m := map[string]uint64{}
	for i, v := range c {
		if v != 0 {
			m[Counter(i).String()] = v
		}
	}
	return m
}

// sameBytes fails with a hex diff when got != want.
func sameBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs\n got: %s\nwant: %s", what, hex.EncodeToString(got), hex.EncodeToString(want))
	}
}
