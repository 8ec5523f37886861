// A backend that is l4lb's own listener is a failed backend, not a loop.

package proxy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// selfService listens on listen and balances over its own address plus
// others, with its listener registered in a Listeners set.
func selfService(t *testing.T, listen string, others ...netip.AddrPort) (*TCPService, netip.AddrPort, []*l4.Backend) {
	t.Helper()
	ln, err := ListenTCP(netip.MustParseAddrPort(listen), ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	self := &Listeners{}
	listenAddr := netip.MustParseAddrPort(listen).Addr()
	self.Add(l4.VIPKey{Addr: netip.AddrPortFrom(listenAddr, addr.Port()), Proto: l4.TCP})
	store := &snapshot.Store{}
	target := addr
	if listenAddr.IsUnspecified() {
		target = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), addr.Port())
	}
	bs := equalBackends(t, store, append([]netip.AddrPort{target}, others...))
	pipes := NewPipePool(0)
	s, err := NewTCPService(TCPConfig{Listener: ln, Snapshots: store, Pipes: pipes, Settings: Settings{Retries: 2}, Self: self, Loops: testLoops(t, pipes)})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Drain(ctx)
	})
	return s, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), addr.Port()), bs
}

func TestSelfConnectIsABackendFailure(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:0", "0.0.0.0:0"} {
		t.Run(listen, func(t *testing.T) {
			echo := startServer(t, echoHandler)
			s, addr, bs := selfService(t, listen, echo)
			const clients = 6
			for i := range clients {
				c, err := net.DialTimeout("tcp4", addr.String(), 2*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				msg := []byte("hello")
				buf := make([]byte, len(msg))
				if _, err := c.Write(msg); err != nil {
					t.Fatalf("client %d: %v", i, err)
				}
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
					t.Fatalf("client %d: read %q, %v (the self backend was not skipped)", i, buf, err)
				}
				c.Close()
			}
			if fails := bs[0].Stats.ConnectFails.Load(); fails == 0 {
				t.Fatal("the self backend was never counted as failing")
			}
			// Each loop attempt costs at most one extra accept; a real loop
			// would have accepted thousands.
			if acc := s.Stats.Accepted.Load(); acc > 3*clients {
				t.Fatalf("%d accepts for %d clients: l4lb connected to itself", acc, clients)
			}
		})
	}
}
