// End-to-end: kernel forwarding (kernel_forwarding = "auto") moves every
// byte intact through the real daemon in namespaces, both ways, with
// half-close, resets, a slow reader and idle timeouts kept, and the byte
// counts exact.

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// kernBulkSize is the bytes each way of TestKernelForwardIntegrity's bulk
// transfer: L4LB_KFWD_BYTES (the issue asks for 1 GiB once), else 64 MiB.
func kernBulkSize(t *testing.T) int64 {
	if s := os.Getenv("L4LB_KFWD_BYTES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("L4LB_KFWD_BYTES: %v", err)
		}
		return n
	}
	return 64 << 20
}

// kernBackend serves on backend 0's port 7000. A client's first byte says
// what it wants:
//
//	'B' seed size(8): stream(seed^0xff, size) is sent back while the
//	   client's bytes are read to EOF; their SHA-256 follows, then a FIN.
//	'E': every byte is echoed until EOF, then a FIN.
//	'R' n(8): n bytes of stream(9, n), then a reset.
//	'W': answers one byte, then reads until EOF or a reset and reports
//	   which on result.
func kernBackend(t *testing.T, tp *testutil.Topology, result chan<- error) {
	var ln net.Listener
	tp.Backends[0].MustDo(t, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("%s:7000", tp.BackendIP(0)))
		return err
	})
	t.Cleanup(func() { ln.Close() })
	testutil.ServeConns(ln, func(c net.Conn) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Minute))
		cmd := make([]byte, 1)
		if _, err := io.ReadFull(c, cmd); err != nil {
			return
		}
		switch cmd[0] {
		case 'B':
			var hdr [9]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			size := int64(binary.BigEndian.Uint64(hdr[1:]))
			sent := make(chan error, 1)
			go func() { _, err := io.Copy(c, stream(hdr[0]^0xff, size)); sent <- err }()
			h := sha256.New()
			_, rerr := io.Copy(h, c)
			if err := <-sent; err != nil || rerr != nil {
				return
			}
			c.Write(h.Sum(nil))
		case 'E':
			io.Copy(c, c)
		case 'R':
			var hdr [8]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			io.Copy(c, stream(9, int64(binary.BigEndian.Uint64(hdr[:]))))
			c.(*net.TCPConn).SetLinger(0)
		case 'W':
			if _, err := c.Write([]byte{'k'}); err != nil {
				result <- err
				return
			}
			_, err := io.Copy(io.Discard, c)
			result <- err
		}
	})
}

// kernConfig is one VIP with kernel forwarding on, and extra keys.
func kernConfig(keys ...string) string {
	return newConf(`kernel_forwarding = "auto"`).vip("k", ":80", keys...).addrs(7000, 0).String()
}

func kdial(t *testing.T, tp *testutil.Topology) *net.TCPConn {
	t.Helper()
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp4", tp.VIP.String()+":80", 5*time.Second)
		return err
	})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	return c.(*net.TCPConn)
}

// bulk sends size bytes of stream(seed, size) and reads the backend's
// stream back (slow: in small reads with pauses), then checks both sums:
// the client's FIN (CloseWrite) reaches the backend while the backend
// still sends (half-close), the backend's FIN ends the client's read.
func bulk(t *testing.T, tp *testutil.Topology, seed byte, size int64, slow bool) {
	t.Helper()
	c := kdial(t, tp)
	hdr := make([]byte, 10)
	hdr[0], hdr[1] = 'B', seed
	binary.BigEndian.PutUint64(hdr[2:], uint64(size))
	sent := make(chan error, 1)
	go func() {
		_, err := c.Write(hdr)
		if err == nil {
			_, err = io.Copy(c, stream(seed, size))
		}
		if err == nil {
			err = c.CloseWrite()
		}
		sent <- err
	}()
	h := sha256.New()
	var r io.Reader = c
	if slow {
		r = &slowReader{r: c}
	}
	n, err := io.CopyN(h, r, size)
	if err != nil {
		t.Fatalf("seed %d: read %d of %d bytes: %v", seed, n, size, err)
	}
	if got, want := h.Sum(nil), streamSum(seed^0xff, size); !bytes.Equal(got, want) {
		t.Fatalf("seed %d: the client received bytes summing to %x, want %x", seed, got, want)
	}
	if err := <-sent; err != nil {
		t.Fatalf("seed %d: send: %v", seed, err)
	}
	back, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(back, streamSum(seed, size)) {
		t.Fatalf("seed %d: the backend received bytes summing to %x (%v), want %x", seed, back, err, streamSum(seed, size))
	}
}

// slowReader reads at most 4 KiB at a time, pausing 1 ms every 64 reads.
type slowReader struct {
	r io.Reader
	n int
}

func (s *slowReader) Read(p []byte) (int, error) {
	s.n++
	if s.n%64 == 0 {
		time.Sleep(time.Millisecond)
	}
	return s.r.Read(p[:min(len(p), 4096)])
}

// echoSizes are exchange sizes around skb and page boundaries (MSS 1448
// on a 1500-byte path, 4 KiB pages, 64 KiB) and a few random ones.
func echoSizes(r *rand.Rand) []int {
	s := []int{1, 2, 1447, 1448, 1449, 2896, 2897, 4095, 4096, 4097, 8192, 16383, 16384, 16385, 65535, 65536, 65537, 200003}
	for range 8 {
		s = append(s, 1+r.IntN(300000))
	}
	return s
}

// echoExchanges does n request/response exchanges of the sizes given in
// turn on one connection, each answer checked byte for byte.
func echoExchanges(t *testing.T, c *net.TCPConn, n int, sizes []int, seed uint64) (moved int64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	buf, got := make([]byte, 300000), make([]byte, 300000)
	for i := range n {
		sz := sizes[i%len(sizes)]
		for j := range sz {
			buf[j] = byte(r.Uint32())
		}
		if _, err := c.Write(buf[:sz]); err != nil {
			t.Fatalf("exchange %d (%d bytes): write: %v", i, sz, err)
		}
		if _, err := io.ReadFull(c, got[:sz]); err != nil {
			t.Fatalf("exchange %d (%d bytes): read: %v", i, sz, err)
		}
		if !bytes.Equal(buf[:sz], got[:sz]) {
			t.Fatalf("exchange %d (%d bytes): echo differs", i, sz)
		}
		moved += int64(sz)
	}
	return moved
}

// kernelConns waits until status counts n connections in the kernel.
func kernelConns(t *testing.T, lb *lbProcess, n int64) plane.Status {
	t.Helper()
	var st plane.Status
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d connections in the kernel", n), func() bool {
		st = lb.status(t)
		return st.Kernel.Conns == n
	})
	return st
}

// TestKernelForwardIntegrity: with kernel_forwarding = "auto", bulk
// transfers each way (kernBulkSize, SHA-256 on both ends, half-close),
// thousands of short exchanges and sizes around skb and page boundaries,
// a slow reader, and resets at random points, all arrive intact or end in
// a reset on the other side; the connections ran in the kernel; the
// backend's byte counts are exact.
func TestKernelForwardIntegrity(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	result := make(chan error, 64)
	kernBackend(t, tp, result)
	lb := startLB(t, tp, kernConfig())
	size := kernBulkSize(t)

	t.Run("bulk each way", func(t *testing.T) {
		start := time.Now()
		bulk(t, tp, 1, size, false)
		t.Logf("%d MiB each way in %v", size>>20, time.Since(start))
	})
	t.Run("slow reader", func(t *testing.T) { bulk(t, tp, 2, 8<<20, true) })
	t.Run("exchanges", func(t *testing.T) {
		c := kdial(t, tp)
		if _, err := c.Write([]byte{'E'}); err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(3, 3))
		small := []int{1, 7, 64, 100, 512, 1448}
		echoExchanges(t, c, 5000, small, 1)
		st := kernelConns(t, lb, 1)
		if st.Kernel.Total == 0 {
			t.Fatalf("no connection went into the kernel: %+v", st.Kernel)
		}
		echoExchanges(t, c, 300, echoSizes(r), 2)
	})
	t.Run("backend resets mid-stream", func(t *testing.T) {
		for i := range 20 {
			n := int64(rand.IntN(4 << 20))
			c := kdial(t, tp)
			hdr := make([]byte, 9)
			hdr[0] = 'R'
			binary.BigEndian.PutUint64(hdr[1:], uint64(n))
			c.Write(hdr)
			got, err := io.ReadAll(c)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("round %d: after %d of %d bytes the client saw %v, want a reset", i, len(got), n, err)
			}
			if want := streamPrefix(9, int64(len(got))); !bytes.Equal(got, want) {
				t.Fatalf("round %d: the %d bytes before the reset differ", i, len(got))
			}
		}
	})
	t.Run("client resets mid-stream", func(t *testing.T) {
		for i := range 20 {
			c := kdial(t, tp)
			c.Write([]byte{'W'})
			// The backend's answer: the connection is through (and, a pump
			// later, in the kernel) before the reset.
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatalf("round %d: no answer from the backend: %v", i, err)
			}
			buf := make([]byte, 1+rand.IntN(1<<20))
			c.Write(buf)
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			c.SetLinger(0)
			c.Close()
			select {
			case err := <-result:
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("round %d: the backend saw %v, want a reset", i, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the backend saw no end of its connection", i)
			}
		}
	})
	// Every connection ended: the counts are final and exact. Bulk moved
	// size+10 and 8 MiB+10 in, size+32 and 8 MiB+32 out; the rest is
	// counted by what each test moved, so check the bulk-only lower
	// bound and that the kernel held no connection.
	st := kernelConns(t, lb, 0)
	b := st.VIPs[0].Backends[0]
	if min := uint64(size + 8<<20); b.BytesIn < min || b.BytesOut < min {
		t.Fatalf("backend counts in %d out %d, below the %d bytes the bulk transfers moved each way", b.BytesIn, b.BytesOut, min)
	}
	t.Logf("kernel forwarding: %+v; backend bytes in %d out %d", st.Kernel, b.BytesIn, b.BytesOut)
}

// streamPrefix is the first n bytes of stream(i, ...).
func streamPrefix(i byte, n int64) []byte {
	b, _ := io.ReadAll(stream(i, n))
	return b
}

// TestKernelForwardCounts: the backend's bytes_in and bytes_out in status
// are exactly what one kernel-forwarded connection moved, while it is
// open (synced by the idle check) and after it ends.
func TestKernelForwardCounts(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	kernBackend(t, tp, make(chan error, 1))
	lb := startLB(t, tp, kernConfig(`idle_timeout = "1s"`))
	c := kdial(t, tp)
	c.Write([]byte{'E'})
	moved := echoExchanges(t, c, 200, []int{1000, 3000}, 5)
	kernelConns(t, lb, 1)
	// Kept busy past the idle timeout: the program's last activity keeps
	// it open (an idle check that did not read it would end it).
	for range 15 {
		moved += echoExchanges(t, c, 1, []int{100}, 6)
		time.Sleep(200 * time.Millisecond)
	}
	c.CloseWrite()
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Fatalf("after the client's FIN: %d bytes, %v; want a clean EOF", len(rest), err)
	}
	kernelConns(t, lb, 0)
	b := lb.status(t).VIPs[0].Backends[0]
	if want := uint64(moved + 1); b.BytesIn != want || b.BytesOut != uint64(moved) {
		t.Fatalf("backend counts in %d out %d, want %d and %d", b.BytesIn, b.BytesOut, want, moved)
	}
}

// TestKernelForwardIdleTimeout: a kernel-forwarded connection that moves
// nothing for idle_timeout is closed by l4lb.
func TestKernelForwardIdleTimeout(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	kernBackend(t, tp, make(chan error, 1))
	lb := startLB(t, tp, kernConfig(`idle_timeout = "1s"`))
	c := kdial(t, tp)
	c.Write([]byte{'E'})
	echoExchanges(t, c, 10, []int{100}, 7)
	start := time.Now() // the last byte moved: idle from here
	kernelConns(t, lb, 1)
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err := io.ReadAll(c)
	if took := time.Since(start); err != nil || took < 800*time.Millisecond || took > 10*time.Second {
		t.Fatalf("idle connection ended after %v with %v; want an end after about 1s", took, err)
	}
}
