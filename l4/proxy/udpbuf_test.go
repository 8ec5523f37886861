package proxy

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// TestUDPGroupBuffersEqual: every socket of a UDP VIP's SO_REUSEPORT group
// ends with the receive and send buffers of the first, whether the first
// has the default or a size set on it (SO_RCVBUFFORCE, as an operator's
// tuning would), and when the group is an inherited one (an upgrade)
// that this process extends. getsockopt reports the doubled value the
// kernel keeps; copying it as it is doubled it again on every member but
// the first.
func TestUDPGroupBuffersEqual(t *testing.T) {
	testutil.RequirePriv(t, "SO_RCVBUFFORCE past net.core.rmem_max needs CAP_NET_ADMIN")
	for _, tc := range []struct {
		name    string
		rcvbuf  int // set on the first socket before the service takes it; 0 = default
		inherit bool
	}{
		{name: "default"},
		{name: "set", rcvbuf: 1 << 20},
		{name: "inherited", rcvbuf: 1 << 20, inherit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loops, err := NewLoops(4, NewPipePool(0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(loops.Close)
			conn, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), ListenOptions{ReusePort: true})
			if err != nil {
				t.Fatal(err)
			}
			raw, err := conn.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			if tc.rcvbuf > 0 {
				var serr error
				raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, tc.rcvbuf) })
				if serr != nil {
					t.Fatal(serr)
				}
			}
			cfg := UDPConfig{Conn: conn, Snapshots: &snapshot.Store{}, Loops: loops}
			if tc.inherit {
				var fd int
				raw.Control(func(f uintptr) { fd, err = unix.Dup(int(f)) })
				if err != nil {
					t.Fatal(err)
				}
				conn.Close()
				cfg.Conn, cfg.Group = nil, []int{fd}
			}
			s, err := NewUDPService(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if len(s.ev.socks) != 4 {
				t.Fatalf("%d sockets for 4 loops", len(s.ev.socks))
			}
			for _, opt := range []struct {
				name string
				opt  int
			}{{"SO_RCVBUF", unix.SO_RCVBUF}, {"SO_SNDBUF", unix.SO_SNDBUF}} {
				var sizes []int
				for _, vs := range s.ev.socks {
					v, err := unix.GetsockoptInt(vs.fd, unix.SOL_SOCKET, opt.opt)
					if err != nil {
						t.Fatal(err)
					}
					sizes = append(sizes, v)
				}
				for i, v := range sizes {
					if v != sizes[0] {
						t.Fatalf("%s by socket of the group: %v; socket %d differs from the first", opt.name, sizes, i)
					}
				}
				if opt.opt == unix.SO_RCVBUF && tc.rcvbuf > 0 && sizes[0] != 2*tc.rcvbuf {
					t.Fatalf("SO_RCVBUF %d on the first socket, want the kernel's doubled %d", sizes[0], 2*tc.rcvbuf)
				}
			}
		})
	}
}
