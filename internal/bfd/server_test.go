package bfd

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// freePort returns a UDP port free on addr now.
func freePort(t *testing.T, addr string) uint16 {
	t.Helper()
	c, err := net.ListenPacket("udp4", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

type changes struct {
	mu  sync.Mutex
	all []Change
}

func (c *changes) add(ch Change) { c.mu.Lock(); c.all = append(c.all, ch); c.mu.Unlock() }
func (c *changes) wait(t *testing.T, d time.Duration, what string, ok func(Change) bool) (Change, time.Time) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		c.mu.Lock()
		for _, ch := range c.all {
			if ok(ch) {
				c.mu.Unlock()
				return ch, time.Now()
			}
		}
		c.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Fatalf("no %s within %v; changes %+v", what, d, c.all)
	return Change{}, time.Time{}
}

// pair runs two servers on 127.0.0.1 and 127.0.0.2, each with a session
// to the other, on ports of their own (unprivileged, loopback only).
func pair(t *testing.T, interval time.Duration) (a, b *Server, ca, cb *changes) {
	t.Helper()
	pa, pb := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.2")
	lo1, lo2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	ca, cb = &changes{}, &changes{}
	a = NewServer(Options{ListenPort: pa, PeerPort: pb, ListenAddr4: lo1, OnChange: ca.add})
	b = NewServer(Options{ListenPort: pb, PeerPort: pa, ListenAddr4: lo2, OnChange: cb.add})
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	if err := a.Set([]SessionConfig{{Peer: lo2, Local: lo1, Interval: interval, Multiplier: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Set([]SessionConfig{{Peer: lo1, Local: lo2, Interval: interval, Multiplier: 3}}); err != nil {
		t.Fatal(err)
	}
	return a, b, ca, cb
}

// TestSessionsComeUpAndDetectSilence: two servers bring their sessions Up
// through Init; when one goes silent (its socket closed, no AdminDown)
// the other declares it Down with diagnostic 1 within the detection time
// (3 x 50ms) and a scheduling margin, a failure for the BGP wiring; a
// peer stopped on purpose (AdminDown) is no failure.
func TestSessionsComeUpAndDetectSilence(t *testing.T) {
	const interval = 50 * time.Millisecond
	a, b, ca, cb := pair(t, interval)
	lo1, lo2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	up := func(ch Change) bool { return ch.To == StateUp }
	ca.wait(t, 5*time.Second, "a up", up)
	cb.wait(t, 5*time.Second, "b up", up)
	sa, _ := a.Session(lo2)
	if sa.State != StateUp || sa.RemoteState != StateUp || sa.RemoteDiscr == 0 || sa.DetectTime != 3*interval {
		t.Fatalf("a's session: %+v", sa)
	}
	// Both ends now send at the fast rate: count a's packets over 1s.
	s0, _ := b.Session(lo1)
	time.Sleep(time.Second)
	s1, _ := b.Session(lo1)
	if n := s1.Received - s0.Received; n < 10 || n > 30 {
		t.Errorf("b received %d packets in 1s at a 50ms interval with jitter, want ~15", n)
	}

	// b goes silent: its sending socket closes under its session.
	b.mu.Lock()
	b.sessions[lo1].conn.Close()
	b.mu.Unlock()
	silent := time.Now()
	down, at := ca.wait(t, 5*time.Second, "a down", func(ch Change) bool { return ch.To == StateDown })
	if d := at.Sub(silent); d > 3*interval+250*time.Millisecond {
		t.Errorf("silence detected after %v, want about 3 x %v", d, interval)
	}
	if down.Diag != DiagTimeExpired || !down.Failure() {
		t.Errorf("a's down: %+v, want detection time expired, a failure", down)
	}
	if sa, _ := a.Session(lo2); sa.Downs != 1 || sa.Ups != 1 {
		t.Errorf("a's counts after the failure: ups %d downs %d", sa.Ups, sa.Downs)
	}
}

func TestAdminDownIsNoFailure(t *testing.T) {
	a, b, ca, cb := pair(t, 50*time.Millisecond)
	up := func(ch Change) bool { return ch.To == StateUp }
	ca.wait(t, 5*time.Second, "a up", up)
	cb.wait(t, 5*time.Second, "b up", up)
	b.Close() // AdminDown to a
	down, _ := ca.wait(t, 5*time.Second, "a down", func(ch Change) bool { return ch.To == StateDown })
	if down.Diag != DiagNeighborDown || down.RemoteState != StateAdminDown || down.Failure() {
		t.Fatalf("a's down after b stopped: %+v, want neighbor down by AdminDown, no failure", down)
	}
	_ = a
}

// TestServerDrops: a datagram with TTL below 255 (GTSM), garbage, and a
// packet for no session are counted and reach no session.
func TestServerDrops(t *testing.T) {
	port := freePort(t, "127.0.0.1")
	lo1 := netip.MustParseAddr("127.0.0.1")
	var ch changes
	s := NewServer(Options{ListenPort: port, PeerPort: freePort(t, "127.0.0.3"), ListenAddr4: lo1, OnChange: ch.add})
	defer s.Close()
	if err := s.Set([]SessionConfig{{Peer: netip.MustParseAddr("127.0.0.3"), Local: lo1, Interval: 50 * time.Millisecond, Multiplier: 3}}); err != nil {
		t.Fatal(err)
	}
	send := func(from string, ttl int, b []byte) {
		t.Helper()
		c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(from+":0")), net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo1, port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		raw, _ := c.SyscallConn()
		raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, ttl) })
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	var down [PacketLen]byte
	(&Packet{State: StateDown, DetectMult: 3, MyDiscr: 5, DesiredMinTx: 1000000, RequiredMinRx: 100000}).Encode(&down)
	send("127.0.0.3", 64, down[:])                             // the peer, but not one hop away
	send("127.0.0.3", 255, []byte("not bfd at all, 24 bytes")) // garbage
	send("127.0.0.4", 255, down[:])                            // not a peer
	deadline := time.Now().Add(3 * time.Second)
	want := Drops{Malformed: 1, TTL: 1, NoSession: 1}
	for s.Drops() != want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.Drops(); got != want {
		t.Fatalf("drops %+v, want %+v", got, want)
	}
	if st, _ := s.Session(netip.MustParseAddr("127.0.0.3")); st.Received != 0 || st.State != StateDown {
		t.Fatalf("the session saw a dropped packet: %+v", st)
	}
	// The same Down packet with TTL 255 from the peer moves it to Init.
	send("127.0.0.3", 255, down[:])
	ch.wait(t, 3*time.Second, "init", func(c Change) bool { return c.To == StateInit })
}
