// max_conn_rate's token bucket on a backend: burst, refusal, refill.

package l4

import (
	"net/netip"
	"testing"
	"time"
)

// TestMaxConnRate: at 100 a second a backend takes a burst of 10 at once,
// then refuses (Full, OverRate, a RateWait of up to one interval) until a
// token is due; a cap of 0 takes everything again; the live count is
// untouched by a refusal.
func TestMaxConnRate(t *testing.T) {
	b := NewBackend("b", netip.MustParseAddrPort("198.18.1.1:80"), nil)
	if b.Limited() || b.OverRate() {
		t.Fatal("limited before a rate was set")
	}
	b.SetMaxConnRate(100)
	n := 0
	for b.TryAcquire() {
		n++
		if n > 1000 {
			t.Fatal("no refusal at 100 a second")
		}
	}
	// The clock runs while the loop does: a busy machine may let one or
	// two more in, never fewer than the burst.
	if n < 10 || n > 12 {
		t.Fatalf("took %d at once, want the burst of 10", n)
	}
	if b.LiveFlows() != int64(n) || !b.Full() || !b.OverRate() {
		t.Fatalf("after the burst: live %d, full %v, over %v", b.LiveFlows(), b.Full(), b.OverRate())
	}
	d := b.RateWait()
	if d <= 0 || d > 10*time.Millisecond {
		t.Fatalf("RateWait %v, want (0, 10ms]", d)
	}
	time.Sleep(d)
	if !b.TryAcquire() {
		t.Fatalf("refused after waiting RateWait %v", d)
	}
	b.SetMaxConnRate(0)
	if b.Limited() || b.Full() || !b.TryAcquire() {
		t.Fatal("rate 0 still limits")
	}
}
