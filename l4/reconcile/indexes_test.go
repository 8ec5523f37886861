package reconcile

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
)

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
