package guard

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

var (
	c1 = netip.MustParseAddr("198.18.0.1")
	c2 = netip.MustParseAddr("198.18.0.2")
)

func TestClientsMaxOpen(t *testing.T) {
	c := NewClients(0)
	lim := Limits{MaxOpen: 2}
	for i := range 2 {
		if v := c.Admit(c1, lim, 1); v != Admitted {
			t.Fatalf("flow %d: %v, want admitted", i, v)
		}
	}
	if v := c.Admit(c1, lim, 1); v != OverOpen {
		t.Fatalf("third flow: %v, want over_open", v)
	}
	if v := c.Admit(netip.MustParseAddr("::ffff:198.18.0.1"), lim, 1); v != OverOpen {
		t.Fatalf("IPv4-mapped form of the same client: %v, want over_open", v)
	}
	if v := c.Admit(c2, lim, 1); v != Admitted {
		t.Fatalf("another client: %v, want admitted", v)
	}
	c.Release(c1, 2)
	if v := c.Admit(c1, lim, 2); v != Admitted {
		t.Fatalf("after a release: %v, want admitted", v)
	}
	c.Release(c1, 3)
	c.Release(c1, 3)
	c.Release(c2, 3)
	if n := c.Len(); n != 0 {
		t.Errorf("%d clients tracked after every flow ended, want 0", n)
	}
}

func TestClientsRate(t *testing.T) {
	c := NewClients(0)
	lim := Limits{Rate: 10}
	now := int64(time.Hour)
	admitted := 0
	for range 25 { // a burst: one second's worth passes
		if c.Admit(c1, lim, now) == Admitted {
			admitted++
			c.Release(c1, now)
		}
	}
	if admitted != 10 {
		t.Fatalf("burst of 25: %d admitted, want 10", admitted)
	}
	if v := c.Admit(c1, lim, now+int64(50*time.Millisecond)); v != OverRate {
		t.Fatalf("50ms later: %v, want over_rate", v)
	}
	if v := c.Admit(c1, lim, now+int64(100*time.Millisecond)); v != Admitted {
		t.Fatalf("one interval later: %v, want admitted", v)
	}
	// Steady at the rate over 10 s: every flow passes.
	at := now + int64(time.Second)*2
	for i := range 100 {
		if v := c.Admit(c1, lim, at+int64(i)*int64(100*time.Millisecond)); v != Admitted {
			t.Fatalf("steady flow %d: %v", i, v)
		}
		c.Release(c1, at)
	}
	if v := c.Admit(c2, lim, now); v != Admitted {
		t.Fatalf("another client: %v", v)
	}
}

func TestClientsOff(t *testing.T) {
	c := NewClients(0)
	if v := c.Admit(c1, Limits{}, 1); v != Untracked {
		t.Fatalf("no limits: %v, want untracked", v)
	}
	if c.Len() != 0 {
		t.Fatal("no limits: client tracked")
	}
}

func TestClientsFullFailsOpen(t *testing.T) {
	c := NewClients(shardCount) // one client per shard
	lim := Limits{MaxOpen: 1}
	var untracked int
	for i := range 1000 {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		switch c.Admit(a, lim, 1) {
		case Untracked:
			untracked++
		case Admitted:
		default:
			t.Fatalf("client %s refused", a)
		}
	}
	if n := c.Len(); n > shardCount {
		t.Errorf("%d clients tracked, bound is %d", n, shardCount)
	}
	if untracked == 0 {
		t.Error("a full table tracked every client")
	}
}

func TestClientsSweep(t *testing.T) {
	c := NewClients(0)
	lim := Limits{Rate: 1}
	c.Admit(c1, lim, 0)
	c.Release(c1, 0) // rate state in force until 1s
	if c.Len() != 1 {
		t.Fatal("rate state forgotten at once")
	}
	if n := c.Sweep(int64(500 * time.Millisecond)); n != 0 {
		t.Fatalf("swept %d before the state ran out", n)
	}
	if n := c.Sweep(int64(2 * time.Second)); n != 1 || c.Len() != 0 {
		t.Fatalf("swept %d, %d left", n, c.Len())
	}
}

func TestClientsConcurrent(t *testing.T) {
	c := NewClients(0)
	lim := Limits{MaxOpen: 3}
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := map[netip.Addr]int{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				a := netip.AddrFrom4([4]byte{198, 18, 0, byte((g + i) % 5)})
				if c.Admit(a, lim, 1) == Admitted {
					n := c.Open(a)
					mu.Lock()
					peak[a] = max(peak[a], n)
					mu.Unlock()
					c.Release(a, 1)
				}
			}
		}()
	}
	wg.Wait()
	for a, n := range peak {
		if n > 3 {
			t.Errorf("%s had %d open, limit 3", a, n)
		}
	}
	if c.Len() != 0 {
		t.Errorf("%d clients left", c.Len())
	}
}

func TestClientsAllocs(t *testing.T) {
	c := NewClients(0)
	lim := Limits{MaxOpen: 10, Rate: 1_000_000}
	now := int64(0)
	if n := testing.AllocsPerRun(1000, func() {
		now += int64(time.Millisecond)
		c.Admit(c1, lim, now)
		c.Release(c1, now)
	}); n != 0 {
		t.Errorf("Admit+Release allocates %v times", n)
	}
}

func BenchmarkClientsAdmitRelease(b *testing.B) {
	c := NewClients(0)
	lim := Limits{MaxOpen: 100, Rate: 1_000_000_000}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var i uint32
		for pb.Next() {
			i++
			a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
			c.Admit(a, lim, int64(i))
			c.Release(a, int64(i))
		}
	})
}

// TestClientsForgetSpentRateState: clients seen once are forgotten by the
// shards' periodic sweep, not kept until the table fills.
func TestClientsForgetSpentRateState(t *testing.T) {
	c := NewClients(0)
	lim := Limits{Rate: 10}
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}) }
	now := int64(time.Hour)
	for i := range 2000 {
		c.Admit(addr(i), lim, now)
		c.Release(addr(i), now)
	}
	if n := c.Len(); n != 2000 {
		t.Fatalf("%d clients tracked while their rate state holds, want 2000", n)
	}
	// A shard sweeps on an Admit that reaches it; shards are chosen by a
	// hash seeded per process, so enough new clients that every shard is
	// reached (500 missed one of 64 in about 2.6% of runs).
	const fresh = 4000
	later := now + 3*sweepEvery
	for i := range fresh {
		c.Admit(addr(10000+i), lim, later)
		c.Release(addr(10000+i), later)
	}
	if n := c.Len(); n > fresh {
		t.Fatalf("%d clients tracked after the first ones' state ran out, want at most the %d new ones", n, fresh)
	}
}
