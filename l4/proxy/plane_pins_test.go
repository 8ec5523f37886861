// Tests of the pins flow sync sends and installs on a real TCP service.

package proxy

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// TestTCPPlanePinSync: a client's pin is what SyncedPins sends; a peer's
// pin for another client address, installed with InstallPin, sends that
// client's connections to its backend (round robin would rotate them)
// and is not sent on; a pin for a client pinned here, for a backend the
// VIP lacks, or for another VIP is refused with its reason.
func TestTCPPlanePinSync(t *testing.T) {
	ts := newService(t, Settings{AffinityTimeout: time.Minute},
		namedServer(t, "b0"), namedServer(t, "b1"), namedServer(t, "b2"))
	p := &TCPPlane{svc: ts.TCPService}
	byName := map[string]*l4.Backend{}
	for _, b := range ts.backends {
		byName[string(b.ID)] = b
	}
	first := ts.backendName(t) // pins 127.0.0.1
	sent := func() ([]plane.SyncedFlow, int) {
		var fs []plane.SyncedFlow
		n := p.SyncedPins(0, func(f plane.SyncedFlow) bool { fs = append(fs, f); return true })
		return fs, n
	}
	fs, fromPeers := sent()
	local := netip.MustParseAddr("127.0.0.1")
	if len(fs) != 1 || fromPeers != 0 || !fs[0].Pin || fs[0].Flow.Src != netip.AddrPortFrom(local, 0) ||
		fs[0].Flow.Dst != ts.addr || fs[0].Backend != byName[first].Addr || fs[0].Age > 5*time.Second {
		t.Fatalf("SyncedPins sent %+v (%d from peers); want the pin of 127.0.0.1 to %s", fs, fromPeers, first)
	}

	peer := netip.MustParseAddr("127.0.0.2")
	var other *l4.Backend
	for name, b := range byName {
		if name != first {
			other = b
			break
		}
	}
	pin := plane.SyncedFlow{Flow: l4.Flow{Src: netip.AddrPortFrom(peer, 0), Dst: ts.addr, Proto: l4.TCP}, Backend: other.Addr, Age: 10 * time.Second, Pin: true}
	// Two client addresses pinned to one backend: round robin would send
	// their first connections to two.
	peer2 := pin
	peer2.Flow.Src = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), 0)
	for _, f := range []plane.SyncedFlow{pin, peer2} {
		if r := p.InstallPin(f); r != plane.Installed {
			t.Fatalf("InstallPin %v = %v, want Installed", f.Flow.Src, r)
		}
	}
	for i := range 4 {
		from := []plane.SyncedFlow{pin, peer2}[i%2].Flow.Src.Addr()
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 3 * time.Second}).Dial("tcp4", ts.addr.String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		name, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(name) != string(other.ID) {
			t.Fatalf("connection %d from %s reached %q (%v); want the installed pin's %s", i, from, name, err, other.ID)
		}
	}
	if fs, fromPeers := sent(); len(fs) != 1 || fromPeers != 2 {
		t.Errorf("after the install SyncedPins sent %d pins, %d from peers; want 1 and 2 (a peer's pin is not sent on)", len(fs), fromPeers)
	}

	known := fs[0]
	known.Backend = other.Addr
	unknown := pin
	unknown.Flow.Src = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.4"), 0)
	unknown.Backend = netip.MustParseAddrPort("127.0.0.1:1")
	foreign := pin
	foreign.Flow.Dst = netip.AddrPortFrom(ts.addr.Addr(), ts.addr.Port()+1)
	for _, c := range []struct {
		name string
		f    plane.SyncedFlow
		want plane.InstallResult
	}{{"a client pinned here", known, plane.InstallKnown}, {"a backend the VIP lacks", unknown, plane.InstallUnknownBackend}, {"another VIP", foreign, plane.InstallForeignVIP}} {
		if r := p.InstallPin(c.f); r != c.want {
			t.Errorf("%s: InstallPin = %v, want %v", c.name, r, c.want)
		}
	}
	if b, _ := ts.Affinity().Peek(ts.key, local); b.Backend != byName[first] {
		t.Errorf("the local pin moved to %v", b.Backend)
	}
}
