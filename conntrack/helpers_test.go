// Test helpers: a fake clock, flow builders, count checks, hook recorders.

package conntrack

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/l4lb/l4lb/l4"
)

// TestMain fails the package if any test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a manual clock for Options.Now.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// flowKey returns a distinct key for i: IPv4 client 198.18.x.y, port from i.
func flowKey(i int, p l4.Protocol) Key {
	f := l4.Flow{
		Src:   netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 16), byte(i >> 8)}), uint16(1024+i&0xff)),
		Dst:   netip.MustParseAddrPort("198.19.0.10:5432"),
		Proto: p,
	}
	return KeyOf(&f)
}

// newBackends returns n backends sharing one VIP-wide counter.
func newBackends(n int) ([]*l4.Backend, *l4.FlowCounter) {
	vip := new(l4.FlowCounter)
	bs := make([]*l4.Backend, n)
	for i := range bs {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(10 + i)}), 5432)
		bs[i] = l4.NewBackend(l4.BackendID(addr.String()), addr, vip)
	}
	return bs, vip
}

// insertPicked acquires a count on b, as a balancer's Pick would, and
// hands it to the table.
func insertPicked(t testing.TB, tb *Table, k Key, b *l4.Backend, owner any) bool {
	t.Helper()
	b.Acquire()
	_, ok, err := tb.Insert(k, b, owner)
	if err != nil {
		t.Fatalf("insert %v: %v", k, err)
	}
	return ok
}

// checkCounts fails unless every backend has want live flows in total and
// none ever released more than it acquired.
func checkCounts(t testing.TB, bs []*l4.Backend, vip *l4.FlowCounter, want int64) {
	t.Helper()
	var sum int64
	for _, b := range bs {
		sum += b.LiveFlows()
		if u := b.Underflows(); u != 0 {
			t.Errorf("backend %s: %d unmatched releases", b.ID, u)
		}
	}
	if sum != want || vip.Load() != want {
		t.Errorf("live flows: backends %d, vip %d, want %d", sum, vip.Load(), want)
	}
}

// recorder counts hook calls, by reason, and remembers ended keys.
type recorder struct {
	starts atomic.Int64
	ends   [numReasons]atomic.Int64

	mu    sync.Mutex
	ended map[Key]Reason
}

func newRecorder() *recorder { return &recorder{ended: map[Key]Reason{}} }

func (r *recorder) hook(o Options) Options {
	o.OnStart = func(Key, Entry) { r.starts.Add(1) }
	o.OnEnd = func(k Key, _ Entry, why Reason) {
		r.ends[why].Add(1)
		r.mu.Lock()
		r.ended[k] = why
		r.mu.Unlock()
	}
	return o
}

func (r *recorder) totalEnds() int64 {
	var n int64
	for i := range r.ends {
		n += r.ends[i].Load()
	}
	return n
}

// mustNew makes a table or fails the test, and closes it at cleanup.
func mustNew(t testing.TB, o Options) *Table {
	t.Helper()
	tb, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}
