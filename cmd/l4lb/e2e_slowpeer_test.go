// End-to-end: a client or a backend that stops reading costs l4lb bounded
// memory (the bytes wait in kernel buffers and pipes), and every byte
// arrives intact once it reads again.

package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

var slowPeerConfig = newConf(`pipe_size = 1048576`).vip("bulk", ":80").addrs(7000, 0).String()

// slowPeerHold is how long the peer stops reading: L4LB_SLOW_PEER_HOLD
// (a Go duration; the figure is 30s), else 5s, which shows the
// same bound: forwarding stalls within a second, and what l4lb holds
// then does not grow while the peer stays silent.
func slowPeerHold(t *testing.T) time.Duration {
	if s := os.Getenv("L4LB_SLOW_PEER_HOLD"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("L4LB_SLOW_PEER_HOLD: %v", err)
		}
		return d
	}
	return 5 * time.Second
}

// vmRSS is a process's resident set size in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// stream is connection i's size pseudo-random bytes.
func stream(i byte, size int64) io.Reader { return io.LimitReader(rand.NewChaCha8([32]byte{i}), size) }

// streamSum is the SHA-256 of stream(i, size).
func streamSum(i byte, size int64) []byte {
	h := sha256.New()
	io.Copy(h, stream(i, size))
	return h.Sum(nil)
}

// bulkBackend serves, in backend 0's namespace on port 7000: a client
// that sends 'D' and an index i gets stream(i, size); one that sends 'U'
// is not read until gate closes, then its bytes are read to EOF and their
// SHA-256 written back.
func bulkBackend(t *testing.T, tp *testutil.Topology, size int64, gate <-chan struct{}) {
	var ln net.Listener
	tp.Backends[0].MustDo(t, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("%s:7000", tp.BackendIP(0)))
		return err
	})
	t.Cleanup(func() { ln.Close() })
	testutil.ServeConns(ln, func(c net.Conn) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Minute))
		cmd := make([]byte, 2)
		if _, err := io.ReadFull(c, cmd); err != nil {
			return
		}
		switch cmd[0] {
		case 'D':
			io.Copy(c, stream(cmd[1], size))
		case 'U':
			<-gate
			h := sha256.New()
			if _, err := io.Copy(h, c); err == nil {
				c.Write(h.Sum(nil))
			}
		}
	})
}

// TestSlowPeerBoundedMemory: a handful of connections, each with 64 MiB
// sent at a peer that stops reading (the client for downloads, the
// backend for uploads) for slowPeerHold: l4lb's RSS grows by less than
// pipe_size per connection; once the peer reads again every byte arrives
// intact.
func TestSlowPeerBoundedMemory(t *testing.T) {
	const (
		conns    = 4
		size     = 64 << 20
		pipeSize = 1 << 20
	)
	hold := slowPeerHold(t)
	for _, dir := range []string{"client stops reading", "backend stops reading"} {
		t.Run(dir, func(t *testing.T) {
			tp := testutil.NewTopology(t, 1)
			gate := make(chan struct{})
			bulkBackend(t, tp, size, gate)
			lb := startLB(t, tp, slowPeerConfig)
			pid := lb.cmd.Process.Pid

			download := dir == "client stops reading"
			cs := make([]net.Conn, conns)
			for i := range cs {
				tp.Client.MustDo(t, func() (err error) {
					cs[i], err = net.DialTimeout("tcp4", tp.VIP.String()+":80", 5*time.Second)
					return err
				})
				t.Cleanup(func() { cs[i].Close() })
				cs[i].SetDeadline(time.Now().Add(hold + time.Minute))
			}
			time.Sleep(300 * time.Millisecond) // every connection reaches its backend
			base := vmRSS(t, pid)

			for i, c := range cs {
				if download {
					c.Write([]byte{'D', byte(i)}) // the backend sends; the client reads nothing yet
					continue
				}
				c.Write([]byte{'U', 0})
				go func() { // the client sends; the backend reads nothing yet
					if _, err := io.Copy(c, stream(byte(i), size)); err != nil {
						t.Errorf("client send: %v", err)
					}
					c.(*net.TCPConn).CloseWrite()
				}()
			}
			peak := base
			for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				peak = max(peak, vmRSS(t, pid))
			}
			grown := peak - base
			t.Logf("%s for %v, %d MiB sent at each of %d connections: l4lb RSS %d KiB before, peak %d KiB, grown %d KiB (%d KiB per connection; pipe_size %d KiB)",
				dir, hold, size>>20, conns, base>>10, peak>>10, grown>>10, grown/conns>>10, pipeSize>>10)
			if grown >= conns*pipeSize {
				t.Errorf("l4lb's RSS grew by %d bytes with %d stalled connections: not under pipe_size (%d) per connection", grown, conns, pipeSize)
			}

			close(gate) // the peer reads again
			for i, c := range cs {
				want := streamSum(byte(i), size)
				if !download {
					back, err := io.ReadAll(c) // the backend's sum of what it received
					if err != nil || !bytes.Equal(back, want) {
						t.Logf("sockets in the balancer's namespace:\n%s", tp.LB.MustExec(t, "ss", "-tnie"))
						t.Fatalf("connection %d: the backend received bytes summing to %x (%v); want %x", i, back, err, want)
					}
					continue
				}
				h := sha256.New()
				n, err := io.Copy(h, c)
				if got := h.Sum(nil); err != nil || n != size || !bytes.Equal(got, want) {
					t.Logf("sockets in the balancer's namespace:\n%s", tp.LB.MustExec(t, "ss", "-tnie"))
					t.Fatalf("connection %d: client read %d bytes (%v), sum %x; want %d bytes, sum %x", i, n, err, got, size, want)
				}
			}
			// The guard of evstall.go finds no lost wake-up: its cause (a
			// short splice under a signal taken for a full socket) is gone.
			if tcp := lb.status(t).VIPs[0].TCP; tcp == nil || tcp.LostWakeups != 0 {
				t.Errorf("lost wake-ups counted by the stall guard: %+v", tcp)
			}
		})
	}
}
