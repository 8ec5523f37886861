package reconcile

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
)

func TestIndexPoolReusesOldestLast(t *testing.T) {
	p := newIndexPool(3)
	var got []uint32
	for range 3 {
		i, err := p.get()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, i)
	}
	if got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("first indexes %v", got)
	}
	if _, err := p.get(); err == nil {
		t.Fatal("a fourth index out of three")
	}
	p.put(2)
	p.put(1)
	p.put(0) // none: ignored
	if i, _ := p.get(); i != 2 {
		t.Fatalf("reused %d, want the first freed (2)", i)
	}
	if i, _ := p.get(); i != 1 {
		t.Fatalf("reused %d, want 1", i)
	}
}

// Every running backend has its own index; a kept backend keeps it across
// a reload, and a removed one's index is not handed to the next backend.
func TestBackendIndexesAcrossReloads(t *testing.T) {
	listens := map[string]netip.AddrPort{}
	addrs := []string{"127.0.0.1:19001", "127.0.0.1:19002", "127.0.0.1:19003"}
	cfg := func(backends ...int) string {
		s := "[global]\nadmin_socket = \"off\"\n"
		for _, vipName := range []string{"a", "b"} {
			listen := testutil.FreeTCPAddr(t)
			if old := listens[vipName]; old.IsValid() {
				listen = old
			}
			listens[vipName] = listen
			s += fmt.Sprintf("[[vip]]\nname = %q\nlisten = %q\n  [vip.health]\n  type = \"none\"\n", vipName, listen)
			for _, i := range backends {
				s += fmt.Sprintf("  [[vip.backend]]\n  address = %q\n", addrs[i])
			}
		}
		return s
	}
	indexes := func(rt *Runtime) map[string]uint32 {
		out := map[string]uint32{}
		seen := map[uint32]bool{}
		for _, v := range rt.Status().VIPs {
			for _, b := range v.Backends {
				if b.Index == 0 || seen[b.Index] {
					t.Fatalf("vip %s backend %s: index %d (zero or taken)", v.Name, b.ID, b.Index)
				}
				seen[b.Index] = true
				out[v.Name+"/"+b.ID] = b.Index
			}
		}
		return out
	}
	rt := startRuntime(t, cfg(0, 1))
	before := indexes(rt)
	apply(t, rt, cfg(1, 2))
	after := indexes(rt)
	for _, k := range []string{"a/" + addrs[1], "b/" + addrs[1]} {
		if before[k] != after[k] {
			t.Fatalf("%s changed index %d -> %d", k, before[k], after[k])
		}
	}
	for _, k := range []string{"a/" + addrs[2], "b/" + addrs[2]} {
		for _, old := range before {
			if after[k] == old {
				t.Fatalf("%s got index %d, freed just now", k, old)
			}
		}
	}
}

func TestIndexPoolReservations(t *testing.T) {
	p := newIndexPool(10)
	a, b := netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.1.2")
	p.reserve(2, a)
	p.reserve(5, b)
	p.reserve(6, b)
	if i, _ := p.get(); i != 1 {
		t.Fatalf("get = %d, want 1", i)
	}
	if i, _ := p.get(); i != 3 {
		t.Fatalf("get = %d, want 3 (2 is reserved)", i)
	}
	if i, _ := p.getFor(b); i != 5 {
		t.Fatalf("getFor(b) = %d, want 5", i)
	}
	if i, _ := p.getFor(netip.MustParseAddr("198.18.1.9")); i != 4 {
		t.Fatalf("getFor(unknown) = %d, want 4", i)
	}
	left := p.unreserve()
	if len(left) != 2 || left[2] != a || left[6] != b {
		t.Fatalf("unreserved %v, want 2 (a) and 6 (b)", left)
	}
	if i, _ := p.getFor(a); i != 7 {
		t.Fatalf("getFor(a) after unreserve = %d, want a fresh 7", i)
	}
}
