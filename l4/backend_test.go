// Backend caps: TryAcquire never passes the cap, however many race for it.

package l4

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
)

// TestTryAcquireCap: 64 goroutines race for the slots of a backend capped
// at 10: exactly 10 win, the VIP counter agrees, Full says so; a release
// frees one slot; uncapped, every acquire succeeds; a cap lowered below
// the live count leaves the flows and refuses new ones.
func TestTryAcquireCap(t *testing.T) {
	vip := new(FlowCounter)
	b := NewBackend("b", netip.MustParseAddrPort("198.18.1.1:80"), vip)
	b.SetMaxFlows(10)
	var won atomic.Int64
	var start, wg sync.WaitGroup
	start.Add(1)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			if b.TryAcquire() {
				won.Add(1)
			}
		}()
	}
	start.Done()
	wg.Wait()
	if won.Load() != 10 || b.LiveFlows() != 10 || vip.Load() != 10 || !b.Full() {
		t.Fatalf("won %d, live %d, vip %d, full %v; want 10, 10, 10, true", won.Load(), b.LiveFlows(), vip.Load(), b.Full())
	}
	b.Release()
	if b.Full() || !b.TryAcquire() || b.TryAcquire() {
		t.Fatal("a release must free exactly one slot")
	}
	b.SetMaxFlows(4)
	if !b.Full() || b.TryAcquire() || b.LiveFlows() != 10 {
		t.Fatalf("lowered cap: full %v, live %d", b.Full(), b.LiveFlows())
	}
	b.SetMaxFlows(0)
	for range 100 {
		if !b.TryAcquire() {
			t.Fatal("uncapped TryAcquire refused")
		}
	}
	if b.Full() || b.LiveFlows() != 110 || b.MaxFlows() != 0 {
		t.Fatalf("uncapped: full %v, live %d", b.Full(), b.LiveFlows())
	}
}
