// Tests of the pins flow sync reads and installs: age kept, local wins,
// peer pins marked, stale ones refused, expiry as a local pin's.

package conntrack

import (
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

func TestAffinityInstallPin(t *testing.T) {
	clk := newFakeClock()
	a, err := NewAffinity(AffinityOptions{Timeout: 10 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bs, _ := newBackends(2)
	v := l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.0.10:5432"), Proto: l4.TCP}
	local, peer, stale := netip.MustParseAddr("198.18.5.1"), netip.MustParseAddr("198.18.5.2"), netip.MustParseAddr("198.18.5.3")
	if err := a.Set(v, local, bs[0]); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.InstallPin(v, local, bs[1], 0); ok || err != nil {
		t.Fatalf("InstallPin over a local pin = %v, %v; want false (the local pin wins)", ok, err)
	}
	if ok, err := a.InstallPin(v, peer, bs[1], 7*time.Minute); !ok || err != nil {
		t.Fatalf("InstallPin = %v, %v; want installed", ok, err)
	}
	if ok, _ := a.InstallPin(v, stale, bs[1], 10*time.Minute); ok {
		t.Fatal("a pin idle for the whole timeout was installed")
	}
	seen := map[netip.Addr]bool{}
	a.RangePins(func(k l4.VIPKey, c netip.Addr, b *l4.Backend, idle time.Duration, fromPeer bool) bool {
		if k != v {
			t.Errorf("pin of %v: VIP %v", c, k)
		}
		seen[c] = fromPeer
		if c == peer && (b != bs[1] || idle < 7*time.Minute || idle > 7*time.Minute+2*time.Second) {
			t.Errorf("peer pin: backend %v idle %v; want %v idle 7m", b.ID, idle, bs[1].ID)
		}
		return true
	})
	if len(seen) != 2 || seen[local] || !seen[peer] {
		t.Errorf("RangePins saw %v; want the local pin unmarked and the peer's marked", seen)
	}
	if b, _ := a.Get(v, local); b != bs[0] {
		t.Errorf("local pin moved to %v", b)
	}
	// Idle 7 minutes on arrival: it ends 3 minutes later, like a local
	// pin idle as long (the local one was refreshed by the Get).
	clk.Advance(3*time.Minute + 2*time.Second)
	a.Sweep()
	if _, ok := a.Peek(v, peer); ok {
		t.Error("the peer's pin outlived its timeout counted from its last use on the peer")
	}
	if _, ok := a.Peek(v, local); !ok {
		t.Error("the local pin expired early")
	}
}
