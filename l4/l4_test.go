package l4

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

func TestFlowCounterNeverNegative(t *testing.T) {
	var vip FlowCounter
	b := NewBackend("a", netip.MustParseAddrPort("198.18.1.11:80"), &vip)
	b.Acquire()
	if !b.Release() || b.Release() {
		t.Fatal("one acquire must allow exactly one release")
	}
	if b.LiveFlows() != 0 || vip.Load() != 0 || b.Underflows() != 1 {
		t.Fatalf("live %d, vip %d, underflows %d", b.LiveFlows(), vip.Load(), b.Underflows())
	}
}

func TestFlowCounterConcurrent(t *testing.T) {
	var vip FlowCounter
	b := NewBackend("a", netip.MustParseAddrPort("198.18.1.11:80"), &vip)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10000 {
				b.Acquire()
				b.Release()
			}
		}()
	}
	wg.Wait()
	if b.LiveFlows() != 0 || vip.Load() != 0 || b.Underflows() != 0 {
		t.Fatalf("live %d, vip %d, underflows %d", b.LiveFlows(), vip.Load(), b.Underflows())
	}
}

func TestEWMA(t *testing.T) {
	var e EWMA
	e.SetAlpha(0.5)
	if _, ok := e.Value(); ok {
		t.Fatal("a fresh EWMA has a value")
	}
	e.Observe(10 * time.Millisecond)
	if v, _ := e.Value(); v != 10*time.Millisecond {
		t.Fatalf("first sample taken as %v", v)
	}
	e.Observe(20 * time.Millisecond)
	if v, _ := e.Value(); v != 15*time.Millisecond {
		t.Fatalf("after 10ms and 20ms at alpha 0.5: %v", v)
	}
	e.Observe(0)
	if v, ok := e.Value(); !ok || v <= 0 {
		t.Fatalf("a zero sample erased the value: %v %v", v, ok)
	}
	e.Reset()
	if _, ok := e.Value(); ok {
		t.Fatal("Reset kept a value")
	}
}

func TestEligibleDefaultsTrue(t *testing.T) {
	b := NewBackend("a", netip.MustParseAddrPort("[2001:db8::1]:80"), nil)
	if !b.Eligible() || b.AddrString() != "[2001:db8::1]:80" {
		t.Fatalf("eligible %v, addr %q", b.Eligible(), b.AddrString())
	}
	b.SetEligible(false)
	if b.Eligible() {
		t.Fatal("SetEligible(false) ignored")
	}
}

func TestEndReasonNames(t *testing.T) {
	names := EndReasonNames()
	seen := map[string]bool{}
	for i, n := range names {
		if n == "" || seen[n] {
			t.Fatalf("end reason %d: name %q missing or repeated", i, n)
		}
		seen[n] = true
		r, err := ParseEndReason(n)
		if err != nil || int(r) != i || r.String() != n {
			t.Fatalf("%q: parsed %v (%v), String %q", n, r, err, r.String())
		}
	}
	if _, err := ParseEndReason("fin"); err == nil {
		t.Fatal("parsed an unknown name")
	}
	if s := EndReason(200).String(); s != "end(200)" {
		t.Fatalf("unnamed: %q", s)
	}
}

func TestBinaryUnits(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		v    float64
		unit string
	}{
		{0, 0, "B"}, {1023, 1023, "B"}, {1024, 1, "KiB"}, {1536, 1.5, "KiB"},
		{16 << 20, 16, "MiB"}, {64 << 40, 64, "TiB"}, {1 << 63, 8, "EiB"},
	} {
		if v, unit := BinaryUnits(tc.n); v != tc.v || unit != tc.unit {
			t.Errorf("BinaryUnits(%d) = %v %s, want %v %s", tc.n, v, unit, tc.v, tc.unit)
		}
	}
}
