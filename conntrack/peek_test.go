// Tests of Peek and Range: they report entries with their age and change
// nothing (no refresh, no counters).

package conntrack

import (
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

func TestPeekRefreshesNothing(t *testing.T) {
	clk := newFakeClock()
	tb := mustNew(t, Options{UDPIdle: 10 * time.Second, Now: clk.Now})
	bs, _ := newBackends(1)
	k := flowKey(1, l4.UDP)
	insertPicked(t, tb, k, bs[0], "owner")
	before := tb.Stats()
	for i := 1; i <= 3; i++ {
		clk.Advance(3 * time.Second)
		tb.Sweep()
		p, ok := tb.Peek(k)
		if !ok || p.Backend != bs[0] || p.Owner != "owner" || p.Idle != time.Duration(3*i)*time.Second || p.Timeout != 10*time.Second {
			t.Fatalf("peek %d: %+v %v", i, p, ok)
		}
	}
	if after := tb.Stats(); after.Lookups != before.Lookups {
		t.Fatalf("peeks counted as lookups: %d -> %d", before.Lookups, after.Lookups)
	}
	// 9s idle: one more second expires it, peeks or not.
	clk.Advance(time.Second)
	tb.Sweep()
	if _, ok := tb.Peek(k); ok {
		t.Fatal("an entry only peeked at did not expire")
	}
	if _, ok := tb.Peek(flowKey(2, l4.UDP)); ok {
		t.Fatal("peek found a key never inserted")
	}
}

func TestRangeSeesEveryEntry(t *testing.T) {
	clk := newFakeClock()
	tb := mustNew(t, Options{Now: clk.Now})
	bs, _ := newBackends(2)
	want := map[Key]*l4.Backend{}
	for i := range 300 {
		k := flowKey(i, l4.TCP)
		insertPicked(t, tb, k, bs[i%2], nil)
		want[k] = bs[i%2]
	}
	clk.Advance(5 * time.Second)
	tb.Sweep()
	seen := 0
	tb.Range(func(k Key, p Peeked) bool {
		if want[k] != p.Backend || p.Idle != 5*time.Second || p.Timeout != DefaultTCPIdle {
			t.Fatalf("%v: %+v, want backend %v", k, p, want[k])
		}
		seen++
		return true
	})
	if seen != len(want) {
		t.Fatalf("range saw %d of %d", seen, len(want))
	}
	n := 0
	tb.Range(func(Key, Peeked) bool { n++; return n < 7 })
	if n != 7 {
		t.Fatalf("range went on after false: %d calls", n)
	}
	if st := tb.Stats(); st.Lookups != 0 {
		t.Fatalf("range counted lookups: %+v", st)
	}
}

func TestAffinityPeek(t *testing.T) {
	clk := newFakeClock()
	a, err := NewAffinity(AffinityOptions{Timeout: time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bs, _ := newBackends(1)
	vip := l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.0.10:5432"), Proto: l4.TCP}
	client := netip.MustParseAddr("198.18.5.1")
	if _, ok := a.Peek(vip, client); ok {
		t.Fatal("pin before any")
	}
	if err := a.Set(vip, client, bs[0]); err != nil {
		t.Fatal(err)
	}
	clk.Advance(40 * time.Second)
	a.Sweep()
	if p, ok := a.Peek(vip, client); !ok || p.Backend != bs[0] || p.Idle != 40*time.Second || a.Timeout() != time.Minute {
		t.Fatalf("peek: %+v %v, timeout %v", p, ok, a.Timeout())
	}
	// The peek did not refresh the pin: 40 + 20 s idle ends it.
	clk.Advance(20 * time.Second)
	a.Sweep()
	if _, ok := a.Get(vip, client); ok {
		t.Fatal("a pin only peeked at outlived its timeout")
	}
}
