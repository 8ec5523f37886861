package proxy

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// holdLoops keeps every loop of ls busy (in a task) until the returned
// release is called, as a loop stuck on other work would be: nothing
// reads the sockets meanwhile.
func holdLoops(t *testing.T, ls *Loops) (release func()) {
	t.Helper()
	gate := make(chan struct{})
	var held sync.WaitGroup
	for _, l := range ls.loops {
		held.Add(1)
		l.post(func() { held.Done(); <-gate })
	}
	held.Wait()
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return release
}

// blast sends n datagrams of size bytes on c.
func blast(t *testing.T, c *net.UDPConn, n, size int) {
	t.Helper()
	msg := make([]byte, size)
	for i := range n {
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
	}
}

// TestUDPQueueDropsCounted: while the loops are held, a client's burst
// overflows the VIP socket's receive queue and the kernel drops most of
// it. Every datagram is then accounted for: forwarded, dropped on a send,
// or counted as dropped by the kernel (QueueDrops, read from the sockets).
// The backend answers nothing, so that no reply's send failure counts in
// Dropped.
func TestUDPQueueDropsCounted(t *testing.T) {
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Minute}, silentUDP(t))
	c := dialUDP(t, ts.addr)
	const n = 3000
	release := holdLoops(t, ts.ev.loops)
	blast(t, c, n, 100)
	release()
	accounted := func() uint64 { return ts.Stats.Datagrams.Load() + ts.Stats.Dropped.Load() + ts.QueueDrops() }
	testutil.Eventually(t, 5*time.Second, "every datagram forwarded or counted as dropped", func() bool { return accounted() == n })
	if ts.QueueDrops() == 0 {
		t.Fatalf("%d datagrams into a held VIP socket, none dropped by the kernel: the test did not overflow the queue", n)
	}
	t.Logf("forwarded %d, send-failed %d, queue-dropped %d", ts.Stats.Datagrams.Load(), ts.Stats.Dropped.Load(), ts.QueueDrops())
	before := ts.QueueDrops()
	ts.Close()
	if got := ts.QueueDrops(); got != before {
		t.Fatalf("the VIP reports %d queue drops after close, %d before", got, before)
	}
}

// burstServer answers a datagram "burst" by sending n datagrams of 100
// bytes to its sender once go is closed; done is closed when they are
// sent. Other datagrams get no answer.
type burstServer struct {
	addr netip.AddrPort
	got  chan struct{}
	send chan struct{}
	done chan struct{}
}

func startBurstServer(t *testing.T, n int) *burstServer {
	t.Helper()
	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	bs := &burstServer{addr: pc.LocalAddr().(*net.UDPAddr).AddrPort(), got: make(chan struct{}), send: make(chan struct{}), done: make(chan struct{})}
	go func() {
		buf := make([]byte, 2048)
		k, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil || string(buf[:k]) != "burst" {
			return
		}
		close(bs.got)
		<-bs.send
		defer close(bs.done)
		msg := make([]byte, 100)
		for range n {
			if _, err := pc.WriteToUDPAddrPort(msg, from); err != nil {
				return
			}
		}
	}()
	return bs
}

// TestUDPReplyQueueDropsCounted: a backend's burst of replies overflows
// the session socket's receive queue while the loops are held; the
// replies the kernel dropped are counted when the session ends, so that
// relayed, send-failed and dropped replies add up to what the backend
// sent.
func TestUDPReplyQueueDropsCounted(t *testing.T) {
	const n = 3000
	srv := startBurstServer(t, n)
	ts := newUDPService(t, "127.0.0.1:0", UDPSettings{SessionTimeout: time.Minute}, srv.addr)
	c := dialUDP(t, ts.addr)
	if _, err := c.Write([]byte("burst")); err != nil {
		t.Fatal(err)
	}
	within(t, srv.got, "the backend to get the request")
	var fd int
	ts.Table().Range(func(_ conntrack.Key, p conntrack.Peeked) bool {
		fd = p.Owner.(*loopSession).reg.fd
		return false
	})
	release := holdLoops(t, ts.ev.loops)
	close(srv.send)
	within(t, srv.done, "the backend's burst")
	release()
	sessionDrops := func() uint64 {
		d, err := socketDrops(fd)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	testutil.Eventually(t, 5*time.Second, "every reply relayed or dropped", func() bool {
		return ts.Stats.Replies.Load()+ts.Stats.Dropped.Load()+sessionDrops() == n
	})
	dropped := sessionDrops()
	if dropped == 0 {
		t.Fatalf("%d replies into a held session socket, none dropped by the kernel: the test did not overflow the queue", n)
	}
	if got := ts.Stats.ReplyQueueDrops.Load(); got != 0 {
		t.Fatalf("%d reply drops counted while the session lives, want them at its end", got)
	}
	ts.Close()
	if got := ts.Stats.ReplyQueueDrops.Load(); got != dropped {
		t.Fatalf("%d reply drops counted when the session ended, the kernel dropped %d", got, dropped)
	}
}

// failObserver records passive health marks.
type failObserver struct {
	mu     sync.Mutex
	failed map[*l4.Backend][]error
	ok     atomic.Int64
}

func (o *failObserver) ConnectOK(*l4.Backend, time.Duration) { o.ok.Add(1) }

func (o *failObserver) ConnectFailed(b *l4.Backend, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed == nil {
		o.failed = map[*l4.Backend][]error{}
	}
	o.failed[b] = append(o.failed[b], err)
}

func (o *failObserver) fails(b *l4.Backend) []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.failed[b]...)
}

// silentUDP is a backend that reads every datagram and answers none.
func silentUDP(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 70000)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// TestUDPSilentBackendCounted: sessions on a backend that answers nothing
// end by session_timeout counted as unanswered on that backend (never on
// the one that answers). With udp_responses (replies expected) each is a
// passive mark and a warning says so; without it, a VIP whose backends
// never answered anyone (a one-way protocol) gets neither mark nor
// warning, and once some backend answered, the warning comes, still
// without a mark.
func TestUDPSilentBackendCounted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		responses int
		echo      bool // the answering backend is there too
		marks     bool
		warns     bool
	}{
		{name: "udp_responses", responses: 1, echo: true, marks: true, warns: true},
		{name: "two-way traffic", echo: true, warns: true},
		{name: "one-way traffic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := []netip.AddrPort{silentUDP(t)}
			if tc.echo {
				addrs = append(addrs, udpEcho(t, "a"))
			}
			core, logs := observer.New(zap.WarnLevel)
			obs := &failObserver{}
			st := UDPSettings{SessionTimeout: time.Second, Responses: tc.responses}
			ts := newUDPServiceWith(t, "127.0.0.1:0", func(c *UDPConfig) { c.Log, c.Observer = zap.New(core), obs }, st, addrs...)
			silent := ts.backends[0]
			// Clients until the silent backend has taken two sessions.
			var answered int
			for i := 0; silent.Stats.Flows.Load() < 2; i++ {
				if i == 100 {
					t.Fatalf("100 clients, %d sessions on the silent backend", silent.Stats.Flows.Load())
				}
				c := dialUDP(t, ts.addr)
				c.Write([]byte("query"))
				c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				if _, err := c.Read(make([]byte, 100)); err == nil {
					answered++
				}
			}
			testutil.Eventually(t, 10*time.Second, "the silent backend's sessions to expire", func() bool { return silent.Stats.Unanswered.Load() == 2 })
			testutil.Eventually(t, 10*time.Second, "every session to end", func() bool { return ts.Sessions() == 0 })
			if tc.echo {
				if n := ts.backends[1].Stats.Unanswered.Load(); n != 0 {
					t.Errorf("%d unanswered sessions on the backend that answers", n)
				}
			}
			fails := obs.fails(silent)
			if tc.marks && (len(fails) != 2 || !errors.Is(fails[0], errNoReply)) {
				t.Errorf("passive marks on the silent backend: %v, want 2 of %v", fails, errNoReply)
			}
			if !tc.marks && len(fails) != 0 {
				t.Errorf("passive marks %v without udp_responses", fails)
			}
			warned := logs.FilterMessageSnippet("answered none").All()
			if tc.warns != (len(warned) > 0) {
				t.Fatalf("warnings %v, want some: %v (%d clients answered)", warned, tc.warns, answered)
			}
			if tc.warns {
				if f := warned[0].ContextMap(); f["backend"] != string(silent.ID) || f["passive_mark"] != tc.marks {
					t.Errorf("warning fields %v", f)
				}
				if len(warned) != 1 {
					t.Errorf("%d warnings within 10 s, want 1", len(warned))
				}
			}
		})
	}
}
