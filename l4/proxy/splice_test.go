package proxy

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// TestSpliceChunkAllocatesNothing: moving a chunk through a direction (wait
// for data, borrow a pipe, splice in, splice out, return the pipe) makes no
// allocation; everything per connection is set up once in init.
func TestSpliceChunkAllocatesNothing(t *testing.T) {
	client, srcEnd := tcpPair(t)
	dstEnd, reader := tcpPair(t)
	svc := &TCPService{pipes: NewPipePool(0)}
	c := &tcpConn{svc: svc, opened: time.Now(), target: l4.NewBackend("b", reader.RemoteAddr().(*net.TCPAddr).AddrPort(), nil)}
	var d direction
	if err := d.init(c, srcEnd, dstEnd, &c.target.Stats.BytesIn); err != nil {
		t.Fatal(err)
	}
	msg, got := make([]byte, 100), make([]byte, 100)
	chunk := func() {
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		p, n, err := d.fill()
		if err != nil || n != len(msg) {
			t.Fatalf("fill: %d bytes, %v", n, err)
		}
		if err := d.drain(p, n); err != nil {
			t.Fatal(err)
		}
		d.pipes.put(d.shard, p)
		if _, err := io.ReadFull(reader, got); err != nil {
			t.Fatal(err)
		}
	}
	chunk() // the pool's first pipe
	if n := testing.AllocsPerRun(200, chunk); n != 0 {
		t.Fatalf("%v allocations per chunk", n)
	}
}
