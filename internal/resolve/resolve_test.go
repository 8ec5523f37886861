// Tests against a real DNS server on loopback (internal/testutil).

package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/l4lb/l4lb/internal/resolve"
	"github.com/l4lb/l4lb/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBoundsNext(t *testing.T) {
	b := resolve.Bounds{Min: time.Second, Max: time.Minute}
	for _, c := range []struct{ ttl, want time.Duration }{
		{0, time.Second},
		{500 * time.Millisecond, time.Second},
		{30 * time.Second, 30 * time.Second},
		{time.Hour, time.Minute},
	} {
		if got := b.Next(c.ttl); got != c.want {
			t.Errorf("Next(%v) = %v, want %v", c.ttl, got, c.want)
		}
	}
}

func TestBoundsRetry(t *testing.T) {
	for _, c := range []struct {
		b    resolve.Bounds
		n    int
		want time.Duration
	}{
		{resolve.Bounds{Min: time.Second, Max: time.Hour}, 1, time.Second},
		{resolve.Bounds{Min: time.Second, Max: time.Hour}, 2, 2 * time.Second},
		{resolve.Bounds{Min: time.Second, Max: time.Hour}, 4, 8 * time.Second},
		{resolve.Bounds{Min: time.Second, Max: time.Hour}, 50, 30 * time.Second}, // capped at 30s
		{resolve.Bounds{Min: time.Second, Max: 5 * time.Second}, 10, 5 * time.Second},
		{resolve.Bounds{Min: time.Minute, Max: time.Hour}, 3, time.Minute}, // never below Min
	} {
		if got := c.b.Retry(c.n); got != c.want {
			t.Errorf("%+v Retry(%d) = %v, want %v", c.b, c.n, got, c.want)
		}
	}
}

func client(t *testing.T, servers ...netip.AddrPort) *resolve.Client {
	t.Helper()
	c, err := resolve.NewClient(resolve.Options{Servers: servers, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func addrs(a resolve.Answer) string {
	var s []string
	for _, x := range a.Targets {
		s = append(s, fmt.Sprintf("%s/%d", x.Addr, x.Priority))
	}
	return fmt.Sprint(s)
}

func TestLookup(t *testing.T) {
	srv := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	srv.SetHost("pg.db.test", 30, netip.MustParseAddr("198.18.1.12"), netip.MustParseAddr("198.18.1.11"), netip.MustParseAddr("2001:db8::11"))
	srv.SetHost("v6only.db.test", 30, netip.MustParseAddr("2001:db8::12"))
	srv.SetHost("t1.db.test", 20, netip.MustParseAddr("198.18.1.21"))
	srv.SetHost("t2.db.test", 60, netip.MustParseAddr("198.18.1.22"))
	srv.SetSRV("_pg._tcp.db.test", 40,
		testutil.SRVRecord{Priority: 10, Port: 6432, Target: "t2.db.test"},
		testutil.SRVRecord{Priority: 0, Port: 5432, Target: "t1.db.test"},
		testutil.SRVRecord{Priority: 0, Port: 5433, Target: "t1.db.test"})
	srv.SetSRV("_none._tcp.db.test", 40, testutil.SRVRecord{Target: "."})
	c := client(t, srv.Addr)
	for _, tc := range []struct {
		name  string
		q     resolve.Query
		want  string
		ttl   time.Duration
		empty bool
	}{
		{"a and aaaa", resolve.Query{Name: "pg.db.test", Port: 5432},
			"[198.18.1.11:5432/0 198.18.1.12:5432/0 [2001:db8::11]:5432/0]", 30 * time.Second, false},
		{"ipv4", resolve.Query{Name: "PG.db.test", Port: 5432, Family: resolve.IPv4}, "[198.18.1.11:5432/0 198.18.1.12:5432/0]", 30 * time.Second, false},
		{"ipv6", resolve.Query{Name: "pg.db.test", Port: 5432, Family: resolve.IPv6}, "[[2001:db8::11]:5432/0]", 30 * time.Second, false},
		{"srv: ports, priorities, smallest ttl", resolve.Query{Name: "_pg._tcp.db.test", SRV: true},
			"[198.18.1.21:5432/0 198.18.1.21:5433/0 198.18.1.22:6432/10]", 20 * time.Second, false},
		{"nxdomain", resolve.Query{Name: "nowhere.db.test", Port: 1}, "", 0, true},
		{"no record of the family", resolve.Query{Name: "v6only.db.test", Port: 1, Family: resolve.IPv4}, "", 0, true},
		{"srv target .", resolve.Query{Name: "_none._tcp.db.test", SRV: true}, "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := c.Lookup(context.Background(), tc.q)
			if tc.empty {
				if !errors.Is(err, resolve.ErrNoRecords) {
					t.Fatalf("Lookup = %v, %v; want ErrNoRecords", addrs(a), err)
				}
				return
			}
			if err != nil || addrs(a) != tc.want || a.TTL != tc.ttl {
				t.Fatalf("Lookup = %s ttl %v, %v; want %s ttl %v", addrs(a), a.TTL, err, tc.want, tc.ttl)
			}
		})
	}
}

// A server that does not answer is an error, not an empty answer; the
// next server is asked.
func TestLookupSilentServer(t *testing.T) {
	dead := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	dead.SetSilent(true)
	good := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	good.SetHost("pg.db.test", 5, netip.MustParseAddr("198.18.1.11"))
	q := resolve.Query{Name: "pg.db.test", Port: 5432, Family: resolve.IPv4}
	start := time.Now()
	_, err := client(t, dead.Addr).Lookup(context.Background(), q)
	if err == nil || errors.Is(err, resolve.ErrNoRecords) {
		t.Fatalf("silent server: err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a silent server took %v, the timeout is 300ms", d)
	}
	a, err := client(t, dead.Addr, good.Addr).Lookup(context.Background(), q)
	if err != nil || addrs(a) != "[198.18.1.11:5432/0]" {
		t.Fatalf("second server: %s, %v", addrs(a), err)
	}
}

func TestNewClientReadsResolvConf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte("search db.test\nnameserver 198.18.0.53\nnameserver 2001:db8::53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := resolve.NewClient(resolve.Options{ResolvConf: path})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.Servers()); got != "[198.18.0.53:53 [2001:db8::53]:53]" {
		t.Errorf("servers = %s", got)
	}
	if _, err := resolve.NewClient(resolve.Options{ResolvConf: filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Error("a missing resolv.conf gave a client")
	}
}

// results collects a watcher's results.
type results struct {
	mu  sync.Mutex
	all []resolve.Result
}

func (r *results) add(x resolve.Result) { r.mu.Lock(); r.all = append(r.all, x); r.mu.Unlock() }
func (r *results) get() []resolve.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]resolve.Result(nil), r.all...)
}

// The watcher looks up again on the TTL (clamped), not on Min.
func TestWatcherFollowsTTL(t *testing.T) {
	srv := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	srv.SetHost("pg.db.test", 1, netip.MustParseAddr("198.18.1.11"))
	var rs results
	w := resolve.Watch(client(t, srv.Addr), resolve.Query{Name: "pg.db.test", Port: 5432, Family: resolve.IPv4},
		resolve.Bounds{Min: 50 * time.Millisecond, Max: time.Minute}, rs.add)
	defer w.Stop()
	<-w.First()
	srv.SetHost("pg.db.test", 1, netip.MustParseAddr("198.18.1.12"))
	time.Sleep(2500 * time.Millisecond)
	got := rs.get()
	// At 1s intervals: 3 lookups in 2.5s (4 on a slow machine); at Min
	// (50ms) there would be about 50.
	if len(got) < 2 || len(got) > 4 {
		t.Fatalf("%d lookups in 2.5s with a 1s TTL, want 3", len(got))
	}
	if got[0].Next != time.Second || addrs(got[len(got)-1].Answer) != "[198.18.1.12:5432/0]" {
		t.Errorf("first next = %v, last answer %s", got[0].Next, addrs(got[len(got)-1].Answer))
	}
	// A TTL above Max waits Max.
	srv.SetHost("big.db.test", 3600, netip.MustParseAddr("198.18.1.11"))
	var big results
	w2 := resolve.Watch(client(t, srv.Addr), resolve.Query{Name: "big.db.test", Port: 1}, resolve.Bounds{Min: time.Second, Max: 2 * time.Second}, big.add)
	<-w2.First()
	w2.Stop()
	if r := big.get(); len(r) != 1 || r[0].Next != 2*time.Second {
		t.Errorf("ttl 1h, max 2s: %+v", r)
	}
}

// Failures are reported and retried from Min, doubling.
func TestWatcherBacksOff(t *testing.T) {
	srv := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	var rs results
	w := resolve.Watch(client(t, srv.Addr), resolve.Query{Name: "nowhere.db.test", Port: 5432},
		resolve.Bounds{Min: 100 * time.Millisecond, Max: 10 * time.Second}, rs.add)
	testutil.Eventually(t, 10*time.Second, "four failed lookups", func() bool { return len(rs.get()) >= 4 })
	w.Stop()
	for i, r := range rs.get()[:4] {
		want := 100 * time.Millisecond << i
		if !errors.Is(r.Err, resolve.ErrNoRecords) || r.Next != want {
			t.Errorf("failure %d: err %v, next %v; want ErrNoRecords, next %v", i+1, r.Err, r.Next, want)
		}
	}
	n := len(rs.get())
	time.Sleep(300 * time.Millisecond)
	if len(rs.get()) != n {
		t.Error("the watcher reported after Stop")
	}
}

// Stop returns promptly even while a lookup waits on a silent server.
func TestWatcherStopDuringLookup(t *testing.T) {
	srv := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	srv.SetSilent(true)
	c, err := resolve.NewClient(resolve.Options{Servers: []netip.AddrPort{srv.Addr}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w := resolve.Watch(c, resolve.Query{Name: "pg.db.test", Port: 1}, resolve.Bounds{Min: time.Second, Max: time.Minute}, func(resolve.Result) {})
	testutil.Eventually(t, 5*time.Second, "a query reached the server", func() bool { return srv.Queries() > 0 })
	start := time.Now()
	w.Stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Stop took %v", d)
	}
	select {
	case <-w.First():
	default:
		t.Error("First not closed after Stop")
	}
}
