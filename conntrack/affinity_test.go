// Tests of Affinity: get/set, replacement, expiry, key separation, no counts.

package conntrack

import (
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

func TestAffinity(t *testing.T) {
	clk := newFakeClock()
	a, err := NewAffinity(AffinityOptions{Timeout: 10 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bs, vip := newBackends(2)
	pg := l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.0.10:5432"), Proto: l4.TCP}
	other := l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.0.10:6379"), Proto: l4.TCP}
	c4 := netip.MustParseAddr("198.18.5.1")
	c6 := netip.MustParseAddr("2001:db8::5:1")

	steps := []struct {
		name string
		do   func()
		vip  l4.VIPKey
		cli  netip.Addr
		want *l4.Backend // nil: no pin
	}{
		{"empty", func() {}, pg, c4, nil},
		{"set", func() { a.Set(pg, c4, bs[0]) }, pg, c4, bs[0]},
		{"other vip unpinned", func() {}, other, c4, nil},
		{"ipv6 client unpinned", func() {}, pg, c6, nil},
		{"replace", func() { a.Set(pg, c4, bs[1]) }, pg, c4, bs[1]},
		{"refreshed by get", func() { clk.Advance(9 * time.Minute); a.Sweep() }, pg, c4, bs[1]},
		{"still within timeout of the get", func() { clk.Advance(9 * time.Minute); a.Sweep() }, pg, c4, bs[1]},
		{"expired", func() { clk.Advance(11 * time.Minute); a.Sweep() }, pg, c4, nil},
		{"set ipv6", func() { a.Set(pg, c6, bs[0]) }, pg, c6, bs[0]},
		{"delete", func() { a.Delete(pg, c6) }, pg, c6, nil},
	}
	for _, s := range steps {
		s.do()
		got, ok := a.Get(s.vip, s.cli)
		if ok != (s.want != nil) || got != s.want {
			t.Errorf("%s: Get = %v, %v; want %v", s.name, got, ok, s.want)
		}
	}
	if st := a.Stats(); st.Expired != 1 || st.Deleted != 1 {
		t.Errorf("stats %+v: want 1 expired, 1 deleted", st)
	}
	checkCounts(t, bs, vip, 0) // pins own no counts, so nothing moved
}

func TestAffinityKeyIgnoresClientPort(t *testing.T) {
	v := l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.0.10:443"), Proto: l4.TCP}
	c := netip.MustParseAddr("198.18.5.1")
	k := AffinityKey(v, c)
	f := k.Flow()
	if f.Src.Port() != 0 || f.Src.Addr() != c || f.Dst != v.Addr || f.Proto != l4.TCP {
		t.Errorf("AffinityKey flow = %v", f)
	}
	if AffinityKey(l4.VIPKey{Addr: v.Addr, Proto: l4.UDP}, c) == k {
		t.Error("protocol is not part of the affinity key")
	}
}
