package flowsync

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// fakeTable stands in for the XDP flow table (a kernel-facing interface;
// the XDP program's own is tested end to end): it serves one VIP with two
// backends, pins the flows it is given, and records what it installs.
type fakeTable struct {
	vip      l4.VIPKey
	backends map[netip.AddrPort]bool

	mu        sync.Mutex
	pinned    []plane.SyncedFlow
	installed map[l4.Flow]plane.SyncedFlow
}

func newFakeTable() *fakeTable {
	return &fakeTable{vip: l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.2.10:80"), Proto: l4.TCP},
		backends:  map[netip.AddrPort]bool{netip.MustParseAddrPort("198.18.1.11:80"): true, netip.MustParseAddrPort("198.18.1.12:80"): true},
		installed: map[l4.Flow]plane.SyncedFlow{}}
}

func (ft *fakeTable) PinnedFlows(within time.Duration, fn func(plane.SyncedFlow) bool) (int, error) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	for _, f := range ft.pinned {
		if f.Age <= within && !fn(f) {
			break
		}
	}
	return len(ft.installed), nil
}

func (ft *fakeTable) InstallFlows(flows []plane.SyncedFlow, results []plane.InstallResult) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	for i, f := range flows {
		switch _, known := ft.installed[f.Flow]; {
		case (l4.VIPKey{Addr: f.Flow.Dst, Proto: f.Flow.Proto}) != ft.vip:
			results[i] = plane.InstallForeignVIP
		case !ft.backends[f.Backend]:
			results[i] = plane.InstallUnknownBackend
		case known:
			results[i] = plane.InstallKnown
		default:
			ft.installed[f.Flow] = f
			results[i] = plane.Installed
		}
	}
}

func (ft *fakeTable) count() int { ft.mu.Lock(); defer ft.mu.Unlock(); return len(ft.installed) }

func freeUDP(t *testing.T) netip.AddrPort {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func flowN(k int, vip string, backend string) plane.SyncedFlow {
	return plane.SyncedFlow{Flow: l4.Flow{Src: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), uint16(20000+k)), Dst: netip.MustParseAddrPort(vip), Proto: l4.TCP},
		Backend: netip.MustParseAddrPort(backend), Age: time.Duration(k) * time.Millisecond}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}

// TestSyncerInstallsAndCounts: A's pinned flows reach B's table with
// their backend and age; flows for a VIP or a backend B lacks are counted
// apart; A's resends are "known"; garbage, a wrong key, a replayed
// datagram and a stale one are each dropped and counted.
func TestSyncerInstallsAndCounts(t *testing.T) {
	pa, pb := freeUDP(t), freeUDP(t)
	ta, tb := newFakeTable(), newFakeTable()
	for k := range 45 {
		ta.pinned = append(ta.pinned, flowN(k, "198.18.2.10:80", fmt.Sprintf("198.18.1.1%d:80", 1+k%2)))
	}
	for k := range 3 {
		ta.pinned = append(ta.pinned, flowN(100+k, "198.18.2.99:80", "198.18.1.11:80"))
	}
	for k := range 2 {
		ta.pinned = append(ta.pinned, flowN(200+k, "198.18.2.10:80", "198.18.1.77:80"))
	}
	opts := func(listen, peer netip.AddrPort, ft *fakeTable) Options {
		return Options{Listen: listen, Peers: []netip.AddrPort{peer}, Key: testKey, Interval: 100 * time.Millisecond, MaxRate: 100000, MaxEntries: 1000,
			Table: func() plane.FlowTable { return ft }}
	}
	a, err := Start(opts(pa, pb, ta))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Start(opts(pb, pa, tb))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitFor(t, 5*time.Second, "45 flows installed on b", func() bool { return tb.count() == 45 })
	waitFor(t, 5*time.Second, "a resend counted as known", func() bool { return b.Status().Known >= 45 })
	tb.mu.Lock()
	for _, want := range ta.pinned[:45] {
		if got := tb.installed[want.Flow]; got != want {
			t.Errorf("installed %+v, want %+v", got, want)
		}
	}
	tb.mu.Unlock()
	st := b.Status()
	if st.ForeignVIP < 3 || st.UnknownBackend < 2 || st.BadAuth+st.Malformed+st.Replays+st.BadVersion != 0 {
		t.Fatalf("b's counters: %+v", st)
	}
	if sa := a.Status(); sa.Sent < 50 || sa.DatagramsSent < 3 || sa.SendErrors != 0 {
		t.Fatalf("a's counters: %+v", sa)
	}

	// Hostile datagrams, straight to b.
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(pb))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, MaxLen)
	fresh := []plane.SyncedFlow{flowN(300, "198.18.2.10:80", "198.18.1.11:80")}
	signed := buf[:newCodec(testKey).encode(buf, Header{Sender: 42, Seq: 1, Time: time.Now().UnixNano()}, fresh)]
	c.Write([]byte("garbage, not a datagram of ours"))
	other := make([]byte, MaxLen)
	c.Write(other[:newCodec([]byte("the wrong key, 16+ bytes")).encode(other, Header{Sender: 43, Seq: 1, Time: time.Now().UnixNano()}, fresh)])
	c.Write(signed)
	c.Write(signed) // the replay
	stale := make([]byte, MaxLen)
	c.Write(stale[:newCodec(testKey).encode(stale, Header{Sender: 44, Seq: 1, Time: time.Now().Add(-time.Minute).UnixNano()}, []plane.SyncedFlow{flowN(301, "198.18.2.10:80", "198.18.1.11:80")})])
	waitFor(t, 5*time.Second, "the hostile datagrams counted", func() bool {
		s := b.Status()
		return s.Malformed == 1 && s.BadAuth == 1 && s.Replays == 2
	})
	if tb.count() != 46 {
		t.Fatalf("b's table holds %d flows, want the 45 and the one fresh signed one", tb.count())
	}
}

// TestSyncerCaps: max_entries bounds the peers' flows in the table and
// max_rate the flows a round sends.
func TestSyncerCaps(t *testing.T) {
	pa, pb := freeUDP(t), freeUDP(t)
	ta, tb := newFakeTable(), newFakeTable()
	for k := range 60 {
		ta.pinned = append(ta.pinned, flowN(k, "198.18.2.10:80", "198.18.1.11:80"))
	}
	a, err := Start(Options{Listen: pa, Peers: []netip.AddrPort{pb}, Key: testKey, Interval: 100 * time.Millisecond, MaxRate: 200, MaxEntries: 1000,
		Table: func() plane.FlowTable { return ta }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Start(Options{Listen: pb, Peers: []netip.AddrPort{pa}, Key: testKey, Interval: time.Second, MaxRate: 100000, MaxEntries: 10,
		Table: func() plane.FlowTable { return tb }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// 200 a second at 100ms rounds: 20 flows a round, the other 40 wait.
	waitFor(t, 5*time.Second, "a's rate cap", func() bool { return a.Status().SendRateLimited >= 40 })
	if s := a.Status(); s.Sent%20 != 0 {
		t.Errorf("a sent %d flows: not whole rounds of 20", s.Sent)
	}
	waitFor(t, 5*time.Second, "b's table cap", func() bool { return b.Status().TableFull > 0 })
	if n := tb.count(); n != 10 {
		t.Fatalf("b installed %d flows, cap 10", n)
	}
}
