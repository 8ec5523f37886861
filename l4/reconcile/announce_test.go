package reconcile

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

const servingVIP = `
[[vip]]
name = %q
listen = "%s"
  [vip.health]
  type = "none"
  [[vip.backend]]
  name = "s1"
  address = "%s"
`

// waitServing waits for a poke of ServingChanged and for Serving to equal
// want: a speaker that recomputes on every poke ends up announcing want.
func waitServing(t *testing.T, rt *Runtime, what string, want ...netip.Addr) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case <-rt.ServingChanged():
			if got := rt.Serving(); slices.Equal(got, want) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: Serving() = %v, want %v", what, rt.Serving(), want)
		}
	}
}

// TestServingFollowsEligibility: an address is served while one VIP on it
// has an eligible backend; a drain or disable of its last backend, or a
// reload removing it, takes it out; shutdown's stopAccepting does too.
func TestServingFollowsEligibility(t *testing.T) {
	s1 := startNamed(t, "s1")
	a1 := testutil.FreeTCPAddr(t)
	a2 := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), a1.Port())
	both := "[global]\nadmin_socket = \"off\"\n" + fmt.Sprintf(servingVIP, "a", a1, s1.addr) + fmt.Sprintf(servingVIP, "b", a2, s1.addr)
	// A VIP on the wildcard address serves but is never announced.
	wild := netip.AddrPortFrom(netip.IPv4Unspecified(), testutil.FreeTCPAddr(t).Port())
	rt := startRuntime(t, both+fmt.Sprintf(servingVIP, "w", wild, s1.addr))
	lo1, lo2 := a1.Addr(), a2.Addr()
	waitServing(t, rt, "start", lo1, lo2)

	if _, err := rt.SetOverride("b", "s1", l4.OverrideDrain, "t", true); err != nil {
		t.Fatal(err)
	}
	waitServing(t, rt, "b's only backend drained", lo1)
	if _, err := rt.SetOverride("b", "s1", l4.OverrideNone, "t", false); err != nil {
		t.Fatal(err)
	}
	waitServing(t, rt, "b's backend back", lo1, lo2)

	// announce = false opts a VIP out; a reload turning it back on
	// announces again.
	optOut := strings.Replace(fmt.Sprintf(servingVIP, "a", a1, s1.addr), "listen =", "announce = false\nlisten =", 1)
	apply(t, rt, "[global]\nadmin_socket = \"off\"\n"+optOut+fmt.Sprintf(servingVIP, "b", a2, s1.addr))
	waitServing(t, rt, "a opted out", lo2)
	apply(t, rt, both)
	waitServing(t, rt, "a opted in again", lo1, lo2)

	apply(t, rt, "[global]\nadmin_socket = \"off\"\n"+fmt.Sprintf(servingVIP, "b", a2, s1.addr))
	waitServing(t, rt, "a removed by a reload", lo2)

	rt.vipNamed("b").stopAccepting()
	waitServing(t, rt, "b stopped accepting")
}
