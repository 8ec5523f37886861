// Status keeps showing what still carries traffic after a reload removed
// it: draining VIPs and removed backends with live flows.

package reconcile

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

func TestStatusShowsWhatStillDrains(t *testing.T) {
	s1, s2 := startNamed(t, "s1"), startNamed(t, "s2")
	a, b := testutil.FreeTCPAddr(t), testutil.FreeTCPAddr(t)
	two := fmt.Sprintf(`
[global]
admin_socket = "off"
drain_timeout = "1m"
[[vip]]
name = "a"
listen = %q
algorithm = "least_conn"
  [vip.health]
  type = "none"
  [[vip.backend]]
  name = "s1"
  address = %q
  [[vip.backend]]
  name = "s2"
  address = %q
[[vip]]
name = "b"
listen = %q
  [vip.health]
  type = "none"
  [[vip.backend]]
  name = "s1"
  address = %q
`, a, s1.addr, s2.addr, b, s1.addr)
	rt := startRuntime(t, two)
	held := map[string]net.Conn{}
	for _, target := range []string{a.String(), a.String(), b.String()} {
		c, err := net.DialTimeout("tcp4", target, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 3)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		held[target+"/"+string(buf[:n-1])] = c
	}
	// Remove backend s2 from a, and VIP b, while connections are open.
	apply(t, rt, fmt.Sprintf(`
[global]
admin_socket = "off"
drain_timeout = "1m"
[[vip]]
name = "a"
listen = %q
algorithm = "least_conn"
  [vip.health]
  type = "none"
  [[vip.backend]]
  name = "s1"
  address = %q
`, a, s1.addr))
	st := rt.Status()
	if len(st.VIPs) != 2 || st.VIPs[1].Name != "b" || !st.VIPs[1].Draining || st.VIPs[0].Draining {
		t.Fatalf("VIPs after removing b: %+v", st.VIPs)
	}
	gone, ok := backendStatus(rt, "a", "s2")
	if !ok || !gone.Removed || gone.Health != "removed" || gone.LiveFlows != 1 {
		t.Fatalf("removed backend s2 with a live connection: %+v (listed %v)", gone, ok)
	}
	for _, c := range held {
		c.Close()
	}
	testutil.Eventually(t, 5*time.Second, "the removed backend and the drained VIP to leave status", func() bool {
		st := rt.Status()
		_, listed := backendStatus(rt, "a", "s2")
		return len(st.VIPs) == 1 && !listed
	})
}
