package proxy

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

// TestHandoverCarriesBytesInFlight: a connection whose client reads
// nothing, with the backend's bytes waiting in l4lb's pipe, is handed to
// another set of loops (as an upgrade hands it to the next process: its
// descriptors duplicated, the old ones closed). With pipes the bytes go
// in their pipe at once, though the client still reads nothing; without
// (a next process that takes no pipes) they are written out first, which
// needs the client to read. Either way the client then reads every byte,
// in order, and an end of file; no pipe or connection is left behind on
// either side.
func TestHandoverCarriesBytesInFlight(t *testing.T) {
	for _, pipes := range []bool{true, false} {
		name := "flushed"
		if pipes {
			name = "in their pipes"
		}
		t.Run(name, func(t *testing.T) { handover(t, pipes) })
	}
}

func handover(t *testing.T, pipes bool) {
	const size = 8 << 20
	sent := make(chan [32]byte, 1)
	addr := startServer(t, func(c *net.TCPConn) {
		sent <- sendRandom(c, size)
		c.Close()
	})
	poolA, poolB := NewPipePool(0), NewPipePool(0)
	a := newServiceOn(t, poolA, newLoopsForTest(t, 1, poolA), Settings{}, addr)
	b := newServiceOn(t, poolB, newLoopsForTest(t, 1, poolB), Settings{}, addr)
	if err := unix.SetsockoptInt(a.ev.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: smallBuffers}
	conn, err := d.Dial("tcp4", a.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	c := conn.(*net.TCPConn)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitBound))
	c.CloseWrite()
	testutil.Eventually(t, 10*time.Second, "l4lb to hold bytes for the client", func() bool { return poolA.Lent() > 0 })

	a.PauseAccepting(true)
	h := sha256.New()
	var got int64
	reading := make(chan error, 1)
	if !pipes { // the flush needs the client to read
		go func() { n, err := io.Copy(h, c); got = n; reading <- err }()
	}
	var handed []*DetachedConn
	st, err := DetachConns([]*TCPService{a.TCPService}, 10*time.Second, pipes, func(ds []*DetachedConn) error {
		for _, d := range ds {
			fds := make([]int, len(d.FDs))
			for i, fd := range d.FDs {
				var err error
				if fds[i], err = unix.Dup(fd); err != nil {
					return err
				}
			}
			if err := b.AdoptConn(d.State, fds, b.backends[0]); err != nil {
				CloseSockets(fds...)
				return err
			}
		}
		handed = append(handed, ds...)
		ReleaseConns(ds)
		return nil
	})
	if err != nil || st.Detached != 1 || st.Kept != 0 || len(handed) != 1 {
		t.Fatalf("detach: %+v, %v, %d handed", st, err, len(handed))
	}
	hd := handed[0]
	if pipes && (!hd.Piped || hd.State.PendingDown == 0 || len(hd.FDs) != 4) {
		t.Fatalf("handed %+v with %d descriptors, want the backend's bytes in their pipe", hd.State, len(hd.FDs))
	}
	if !pipes && (hd.Piped || !hd.Flushed || hd.State.PendingDown != 0 || len(hd.FDs) != 2) {
		t.Fatalf("handed %+v with %d descriptors, want them flushed first", hd.State, len(hd.FDs))
	}
	if pipes {
		go func() { n, err := io.Copy(h, c); got = n; reading <- err }()
	}
	if err := within(t, reading, "the client reads to its end"); err != nil || got != size {
		t.Fatalf("client read %d bytes, %v; want %d", got, err, size)
	}
	if want := within(t, sent, "the backend's checksum"); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("the bytes differ")
	}
	testutil.Eventually(t, 5*time.Second, "the connection ends on the new loops", func() bool { return b.Stats.Active.Load() == 0 })
	if a.Stats.Active.Load() != 0 || poolA.Lent() != 0 || poolB.Lent() != 0 {
		t.Fatalf("left behind: old active %d, pipes lent old %d new %d", a.Stats.Active.Load(), poolA.Lent(), poolB.Lent())
	}
}

// TestAdoptRefusesAPipeThatDisagrees: a handed-over pipe must hold the
// bytes the state says; else the connection is refused (it stays with the
// old process) and nothing is taken.
func TestAdoptRefusesAPipeThatDisagrees(t *testing.T) {
	pool := NewPipePool(0)
	s := newServiceOn(t, pool, newLoopsForTest(t, 1, pool), Settings{}, startServer(t, echoHandler))
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	unix.Write(p[1], []byte("five!"))
	socks, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseSockets(socks[:]...)
	for _, tc := range []struct {
		st  ConnState
		fds []int
	}{
		{ConnState{PendingDown: 6}, []int{socks[0], socks[1], p[0], p[1]}},
		{ConnState{PendingDown: 5}, []int{socks[0], socks[1]}},
		{ConnState{PendingUp: -1}, []int{socks[0], socks[1]}},
	} {
		if err := s.AdoptConn(tc.st, tc.fds, s.backends[0]); err == nil {
			t.Fatalf("adopted %+v with %d descriptors", tc.st, len(tc.fds))
		}
	}
	if s.Stats.Active.Load() != 0 || s.backends[0].LiveFlows() != 0 {
		t.Fatal("a refused adoption was counted")
	}
}
