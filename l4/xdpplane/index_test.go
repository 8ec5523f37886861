package xdpplane

import (
	"net/netip"
	"testing"
)

func TestIndexPoolReusesOldestLast(t *testing.T) {
	p := NewIndexPool(3)
	var got []uint32
	for range 3 {
		i, err := p.Get()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, i)
	}
	if got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("first indexes %v", got)
	}
	if _, err := p.Get(); err == nil {
		t.Fatal("a fourth index out of three")
	}
	p.Put(2)
	p.Put(1)
	p.Put(0) // none: ignored
	if i, _ := p.Get(); i != 2 {
		t.Fatalf("reused %d, want the first freed (2)", i)
	}
	if i, _ := p.Get(); i != 1 {
		t.Fatalf("reused %d, want 1", i)
	}
}

func TestIndexPoolReservations(t *testing.T) {
	p := NewIndexPool(10)
	a, b := netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.1.2")
	p.Reserve(2, a)
	p.Reserve(5, b)
	p.Reserve(6, b)
	if i, _ := p.Get(); i != 1 {
		t.Fatalf("get = %d, want 1", i)
	}
	if i, _ := p.Get(); i != 3 {
		t.Fatalf("get = %d, want 3 (2 is reserved)", i)
	}
	if i, _ := p.GetFor(b); i != 5 {
		t.Fatalf("getFor(b) = %d, want 5", i)
	}
	if i, _ := p.GetFor(netip.MustParseAddr("198.18.1.9")); i != 4 {
		t.Fatalf("getFor(unknown) = %d, want 4", i)
	}
	left := p.Unreserve()
	if len(left) != 2 || left[2] != a || left[6] != b {
		t.Fatalf("unreserved %v, want 2 (a) and 6 (b)", left)
	}
	if i, _ := p.GetFor(a); i != 7 {
		t.Fatalf("getFor(a) after unreserve = %d, want a fresh 7", i)
	}
}
