// Tests of Table operations: lookups, count ownership, eviction, hooks, concurrency.

package conntrack

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

func TestLookupInsertDelete(t *testing.T) {
	clk := newFakeClock()
	tb := mustNew(t, Options{Now: clk.Now})
	bs, vip := newBackends(2)
	k := flowKey(7, l4.TCP)

	if _, ok := tb.Lookup(k); ok {
		t.Fatal("lookup of an empty table hit")
	}
	if !insertPicked(t, tb, k, bs[0], "session") {
		t.Fatal("first insert did not insert")
	}
	e, ok := tb.Lookup(k)
	if !ok || e.Backend != bs[0] || e.Owner != "session" || e.State != StateNew {
		t.Fatalf("lookup = %+v, %v", e, ok)
	}
	if !tb.SetState(k, StateEstablished) {
		t.Fatal("SetState missed")
	}
	if e, _ := tb.Lookup(k); e.State != StateEstablished {
		t.Errorf("state = %v, want established", e.State)
	}
	if !tb.Delete(k) || tb.Delete(k) {
		t.Error("Delete should succeed once")
	}
	checkCounts(t, bs, vip, 0)
	st := tb.Stats()
	want := Stats{Inserts: 1, Deleted: 1, Lookups: 3, Hits: 2, Misses: 1}
	if st != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
}

func TestInitialState(t *testing.T) {
	tb := mustNew(t, Options{Uncounted: true})
	bs, _ := newBackends(1)
	for _, tc := range []struct {
		p    l4.Protocol
		want State
	}{{l4.TCP, StateNew}, {l4.UDP, StateActive}} {
		e, _, _ := tb.Insert(flowKey(1, tc.p), bs[0], nil)
		if e.State != tc.want {
			t.Errorf("%v starts %v, want %v", tc.p, e.State, tc.want)
		}
	}
}

// TestReleaseExactlyOnce runs each way an entry can end, or move, and checks
// that every acquired count is released once: live flows back to zero, no
// underflow, one end event per start.
func TestReleaseExactlyOnce(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		run  func(t *testing.T, tb *Table, clk *fakeClock, bs []*l4.Backend)
		want [numReasons]int64 // end events by reason, counting Close
	}{
		{"delete", Options{}, func(t *testing.T, tb *Table, _ *fakeClock, bs []*l4.Backend) {
			insertPicked(t, tb, flowKey(1, l4.TCP), bs[0], nil)
			tb.Delete(flowKey(1, l4.TCP))
		}, [numReasons]int64{ReasonDeleted: 1}},
		{"expire", Options{UDPIdle: time.Minute}, func(t *testing.T, tb *Table, clk *fakeClock, bs []*l4.Backend) {
			insertPicked(t, tb, flowKey(1, l4.UDP), bs[0], nil)
			clk.Advance(2 * time.Minute)
			tb.Sweep()
		}, [numReasons]int64{ReasonExpired: 1}},
		{"evict", Options{MaxEntries: 64, Shards: 1}, func(t *testing.T, tb *Table, _ *fakeClock, bs []*l4.Backend) {
			for i := 0; i < 65; i++ {
				insertPicked(t, tb, flowKey(i, l4.TCP), bs[i%2], nil)
			}
		}, [numReasons]int64{ReasonEvicted: 1, ReasonClosed: 64}},
		{"rebind", Options{}, func(t *testing.T, tb *Table, _ *fakeClock, bs []*l4.Backend) {
			k := flowKey(1, l4.TCP)
			insertPicked(t, tb, k, bs[0], nil)
			bs[1].Acquire()
			if err := tb.Rebind(k, bs[1]); err != nil {
				t.Fatal(err)
			}
			if bs[0].LiveFlows() != 0 || bs[1].LiveFlows() != 1 {
				t.Errorf("after rebind: live %d, %d; want 0, 1", bs[0].LiveFlows(), bs[1].LiveFlows())
			}
			if e, _ := tb.Lookup(k); e.Backend != bs[1] {
				t.Errorf("rebind left backend %v", e.Backend.ID)
			}
		}, [numReasons]int64{ReasonClosed: 1}},
		{"rebind missing", Options{}, func(t *testing.T, tb *Table, _ *fakeClock, bs []*l4.Backend) {
			bs[1].Acquire()
			if err := tb.Rebind(flowKey(1, l4.TCP), bs[1]); !errors.Is(err, ErrNotFound) {
				t.Errorf("rebind of a missing flow: %v, want ErrNotFound", err)
			}
		}, [numReasons]int64{}},
		{"duplicate insert", Options{}, func(t *testing.T, tb *Table, _ *fakeClock, bs []*l4.Backend) {
			k := flowKey(1, l4.UDP)
			insertPicked(t, tb, k, bs[0], "first")
			bs[1].Acquire()
			e, ok, err := tb.Insert(k, bs[1], "second")
			if ok || err != nil || e.Backend != bs[0] || e.Owner != "first" {
				t.Errorf("duplicate insert = %+v, %v, %v; want the first entry", e, ok, err)
			}
		}, [numReasons]int64{ReasonClosed: 1}},
		{"insert after close", Options{}, func(t *testing.T, tb *Table, _ *fakeClock, bs []*l4.Backend) {
			tb.Close()
			bs[0].Acquire()
			if _, ok, err := tb.Insert(flowKey(1, l4.TCP), bs[0], nil); ok || !errors.Is(err, ErrClosed) {
				t.Errorf("insert after close = %v, %v; want ErrClosed", ok, err)
			}
		}, [numReasons]int64{}},
		{"close", Options{}, func(t *testing.T, tb *Table, _ *fakeClock, bs []*l4.Backend) {
			for i := 0; i < 1000; i++ {
				insertPicked(t, tb, flowKey(i, l4.TCP), bs[i%2], nil)
			}
		}, [numReasons]int64{ReasonClosed: 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk, rec := newFakeClock(), newRecorder()
			o := tt.opts
			o.Now = clk.Now
			tb := mustNew(t, rec.hook(o))
			bs, vip := newBackends(2)
			tt.run(t, tb, clk, bs)
			tb.Close()
			checkCounts(t, bs, vip, 0)
			for r := range numReasons {
				if got := rec.ends[r].Load(); got != tt.want[r] {
					t.Errorf("%v events = %d, want %d", r, got, tt.want[r])
				}
			}
			if rec.starts.Load() != rec.totalEnds() {
				t.Errorf("%d starts but %d ends", rec.starts.Load(), rec.totalEnds())
			}
		})
	}
}

func TestUncountedTableTouchesNoCounts(t *testing.T) {
	tb := mustNew(t, Options{Uncounted: true, MaxEntries: 64, Shards: 1})
	bs, vip := newBackends(2)
	for i := 0; i < 100; i++ { // 36 evictions
		if _, _, err := tb.Insert(flowKey(i, l4.TCP), bs[i%2], nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Rebind(flowKey(99, l4.TCP), bs[0]); err != nil {
		t.Fatal(err)
	}
	tb.Delete(flowKey(99, l4.TCP))
	tb.Close()
	checkCounts(t, bs, vip, 0)
}

func TestNilBackend(t *testing.T) {
	tb := mustNew(t, Options{})
	if _, _, err := tb.Insert(flowKey(1, l4.TCP), nil, nil); !errors.Is(err, ErrNilBackend) {
		t.Errorf("Insert(nil) = %v", err)
	}
	if err := tb.Rebind(flowKey(1, l4.TCP), nil); !errors.Is(err, ErrNilBackend) {
		t.Errorf("Rebind(nil) = %v", err)
	}
}

// TestSetMaxEntries: a raised cap lets a full table take more entries
// without evicting any (the shards stay, each holds more); a lowered one
// evicts nothing at once, only on inserts above it.
func TestSetMaxEntries(t *testing.T) {
	tb := mustNew(t, Options{MaxEntries: 256})
	bs, vip := newBackends(4)
	if err := tb.SetMaxEntries(4096); err != nil {
		t.Fatal(err)
	}
	if got := tb.MaxEntries(); got != 4096 {
		t.Fatalf("MaxEntries() = %d after SetMaxEntries(4096)", got)
	}
	for i := range 2048 {
		insertPicked(t, tb, flowKey(i, l4.UDP), bs[i%4], i)
	}
	if st := tb.Stats(); st.Entries != 2048 || st.Evicted != 0 {
		t.Fatalf("entries %d, evicted %d: want 2048, 0 under a cap of 4096 raised from 256", st.Entries, st.Evicted)
	}
	checkCounts(t, bs, vip, 2048)
	if err := tb.SetMaxEntries(256); err != nil {
		t.Fatal(err)
	}
	if st := tb.Stats(); st.Entries != 2048 || st.Evicted != 0 {
		t.Fatalf("lowering the cap ended entries at once: %+v", st)
	}
	insertPicked(t, tb, flowKey(5000, l4.UDP), bs[0], 5000)
	if st := tb.Stats(); st.Evicted != 1 {
		t.Fatalf("an insert above a lowered cap evicted %d, want 1", st.Evicted)
	}
	if err := tb.SetMaxEntries(-1); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("SetMaxEntries(-1) = %v, want ErrBadOptions", err)
	}
}

// TestEvictionOldestFirst fills a one-shard table with flows one tick apart,
// then overfills it: every overflow evicts exactly one entry, counted and
// reported, and victims come from the old end.
func TestEvictionOldestFirst(t *testing.T) {
	const capacity, extra = 256, 64
	clk, rec := newFakeClock(), newRecorder()
	tb := mustNew(t, rec.hook(Options{MaxEntries: capacity, Shards: 1, Now: clk.Now}))
	bs, vip := newBackends(4)
	for i := 0; i < capacity+extra; i++ {
		insertPicked(t, tb, flowKey(i, l4.TCP), bs[i%4], i)
		clk.Advance(time.Second)
		tb.Sweep() // moves the clock; nothing is idle for two hours
	}
	st := tb.Stats()
	if st.Entries != capacity || st.Evicted != extra || rec.ends[ReasonEvicted].Load() != extra {
		t.Fatalf("entries %d evicted %d (events %d); want %d, %d",
			st.Entries, st.Evicted, rec.ends[ReasonEvicted].Load(), capacity, extra)
	}
	checkCounts(t, bs, vip, capacity)
	old := 0
	for i := 0; i < capacity+extra; i++ {
		if _, gone := rec.ended[flowKey(i, l4.TCP)]; gone && i < (capacity+extra)/2 {
			old++
		}
	}
	if old < extra*9/10 {
		t.Errorf("only %d of %d victims were from the older half", old, extra)
	}
}

// TestCapIsHard checks that a many-shard table never holds more than
// MaxEntries.
func TestCapIsHard(t *testing.T) {
	const capacity = 4096
	tb := mustNew(t, Options{MaxEntries: capacity, Shards: 16})
	bs, vip := newBackends(1)
	for i := 0; i < 3*capacity; i++ {
		insertPicked(t, tb, flowKey(i, l4.UDP), bs[0], nil)
		if n := tb.Len(); n > capacity {
			t.Fatalf("%d entries over a cap of %d", n, capacity)
		}
	}
	st := tb.Stats()
	if st.Inserts-st.Evicted != uint64(st.Entries) {
		t.Errorf("inserts %d - evicted %d != entries %d", st.Inserts, st.Evicted, st.Entries)
	}
	checkCounts(t, bs, vip, int64(st.Entries))
}

func TestLookupRefreshesLastSeen(t *testing.T) {
	clk := newFakeClock()
	tb := mustNew(t, Options{UDPIdle: 10 * time.Second, Now: clk.Now})
	bs, _ := newBackends(1)
	k := flowKey(1, l4.UDP)
	insertPicked(t, tb, k, bs[0], nil)
	for i := 0; i < 5; i++ { // 25s in all, never 10s idle
		clk.Advance(5 * time.Second)
		tb.Sweep()
		if _, ok := tb.Lookup(k); !ok {
			t.Fatalf("flow expired after %d lookups", i)
		}
		s, tag := tb.locate(&k)
		_, slot, _ := s.find(&k, tag)
		if got, want := s.at(slot).last.Load(), tb.clock.Load(); got != want {
			t.Errorf("last seen tick %d, want %d", got, want)
		}
	}
}

// TestConcurrent inserts, looks up, rebinds and deletes from many
// goroutines while another sweeps with a fast-moving clock. Run with -race.
func TestConcurrent(t *testing.T) {
	const workers, perWorker = 8, 2000
	clk, rec := newFakeClock(), newRecorder()
	tb := mustNew(t, rec.hook(Options{
		MaxEntries: 4096, Shards: 16, UDPIdle: 3 * time.Second, SweepBatch: 64, Now: clk.Now,
	}))
	bs, vip := newBackends(4)
	stop := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(time.Second)
				tb.Sweep()
			}
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { churn(t, tb, bs, w, perWorker) })
	}
	wg.Wait()
	close(stop)
	sweeper.Wait()
	tb.Close()
	checkCounts(t, bs, vip, 0)
	st := tb.Stats()
	if ends := st.Deleted + st.Expired + st.Evicted + st.Closed; ends != st.Inserts {
		t.Errorf("inserts %d but ends %d (%+v)", st.Inserts, ends, st)
	}
	if rec.starts.Load() != int64(st.Inserts) || rec.totalEnds() != int64(st.Inserts) {
		t.Errorf("hooks: %d starts, %d ends; %d inserts", rec.starts.Load(), rec.totalEnds(), st.Inserts)
	}
}

// churn is one worker of TestConcurrent: random operations on keys shared
// with the other workers (so duplicates and lost races happen).
func churn(t *testing.T, tb *Table, bs []*l4.Backend, w, n int) {
	r := rand.New(rand.NewPCG(uint64(w), 1))
	for range n {
		k := flowKey(r.IntN(3000), l4.UDP)
		b := bs[r.IntN(len(bs))]
		switch op := r.IntN(10); {
		case op < 4:
			insertPicked(t, tb, k, b, nil)
		case op < 8:
			if e, ok := tb.Lookup(k); ok && e.Backend == nil {
				t.Error("live entry without a backend")
			}
		case op < 9:
			b.Acquire()
			if err := tb.Rebind(k, b); err != nil && !errors.Is(err, ErrNotFound) {
				t.Error(err)
			}
		default:
			tb.Delete(k)
		}
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Shards: 3},
		{Shards: 1 << 13},
		{MaxEntries: -1},
		{TCPIdle: -time.Second},
		{SweepBatch: -1},
		{Tick: time.Nanosecond, TCPIdle: time.Hour},
	} {
		if _, err := New(o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("New(%+v) = %v, want ErrBadOptions", o, err)
		}
	}
}

func TestShardsLoweredForSmallTables(t *testing.T) {
	tb := mustNew(t, Options{MaxEntries: 1000, Shards: 256})
	if got := len(tb.shards); got != 8 {
		t.Errorf("%d shards for 1000 entries, want 8 (>= 64 entries each)", got)
	}
}

// TestPerPacketOpsAllocateNothing: the operations a packet or a new flow
// performs on a warm table (lookup of a live flow, insert into a slot
// freed by a delete, the delete itself) make no heap allocation.
func TestPerPacketOpsAllocateNothing(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters distort allocation counts")
	}
	tb := mustNew(t, Options{MaxEntries: 4096})
	bs, _ := newBackends(1)
	const n = 1024
	for i := range n {
		insertPicked(t, tb, flowKey(i, l4.UDP), bs[0], nil)
	}
	hit := flowKey(7, l4.UDP)
	if got := testing.AllocsPerRun(1000, func() {
		if _, ok := tb.Lookup(hit); !ok {
			t.Fatal("live flow not found")
		}
	}); got != 0 {
		t.Fatalf("Lookup: %v allocations", got)
	}
	churn := flowKey(n+1, l4.UDP)
	if got := testing.AllocsPerRun(1000, func() {
		insertPicked(t, tb, churn, bs[0], nil)
		if !tb.Delete(churn) {
			t.Fatal("inserted flow not deleted")
		}
	}); got != 0 {
		t.Fatalf("Insert+Delete: %v allocations", got)
	}
}
