// Status order: the VIPs as the file lists them.

package reconcile

import (
	"fmt"
	"slices"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
)

// TestStatusInFileOrder (D31): status lists the VIPs as the file does, not
// by name, and a reload's new order with them.
func TestStatusInFileOrder(t *testing.T) {
	be := startNamed(t, "be")
	vip := func(name string) string {
		return fmt.Sprintf("[[vip]]\nname = %q\nlisten = %q\n  [vip.health]\n  type = \"none\"\n  [[vip.backend]]\n  address = %q\n",
			name, testutil.FreeTCPAddr(t), be.addr)
	}
	zeta, alpha, mid := vip("zeta"), vip("alpha"), vip("mid")
	names := func(rt *Runtime) []string {
		var out []string
		for _, v := range rt.Status().VIPs {
			out = append(out, v.Name)
		}
		return out
	}
	rt := startRuntime(t, "[global]\nadmin_socket = \"off\"\n"+zeta+alpha+mid)
	if got := names(rt); !slices.Equal(got, []string{"zeta", "alpha", "mid"}) {
		t.Fatalf("status lists %v, want the file's order zeta alpha mid", got)
	}
	apply(t, rt, "[global]\nadmin_socket = \"off\"\n"+mid+zeta+alpha)
	if got := names(rt); !slices.Equal(got, []string{"mid", "zeta", "alpha"}) {
		t.Fatalf("after a reload: %v, want mid zeta alpha", got)
	}
}
