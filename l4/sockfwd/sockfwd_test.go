package sockfwd

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// pair is a connected loopback TCP pair: the outer end a test talks on,
// the inner end that goes into the map.
func pair(t *testing.T) (outer *net.TCPConn, inner int) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	in, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	f, err := in.File() // a blocking duplicate the test owns
	in.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close(); f.Close() })
	return o, int(f.Fd())
}

func load(t *testing.T) *Forwarder {
	t.Helper()
	testutil.RequirePriv(t, "loads an sk_skb program")
	f, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestForwardBothWays: bytes written on one outer end come out of the
// other, intact, both ways at once, and the program counts them per
// direction; bytes already queued before Add are forwarded without
// waiting for the next skb (the kick).
func TestForwardBothWays(t *testing.T) {
	f := load(t)
	client, a := pair(t)
	server, b := pair(t)
	if _, err := client.Write([]byte("early")); err != nil { // queued on a before Add
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	p, err := f.Add(a, b)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(server, got); err != nil || string(got) != "early" {
		t.Fatalf("bytes queued before Add: %q, %v", got, err)
	}
	const n = 8 << 20
	up, down := make([]byte, n), make([]byte, n)
	rand.Read(up)
	rand.Read(down)
	errc := make(chan error, 2)
	go func() { _, err := client.Write(up); errc <- err }()
	go func() { _, err := server.Write(down); errc <- err }()
	gotUp, gotDown := make([]byte, n), make([]byte, n)
	client.SetReadDeadline(time.Now().Add(20 * time.Second))
	server.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(server, gotUp); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(client, gotDown); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if sha256.Sum256(gotUp) != sha256.Sum256(up) || !bytes.Equal(gotDown, down) {
		t.Fatal("bytes differ")
	}
	da, err := f.Read(p.A)
	if err != nil {
		t.Fatal(err)
	}
	db, err := f.Read(p.B)
	if err != nil {
		t.Fatal(err)
	}
	if da.Bytes != n+5 || db.Bytes != n || da.LastNs == 0 {
		t.Fatalf("counts %+v %+v, want %d and %d", da, db, n+5, n)
	}
	f.Remove(p)
	if _, err := f.Read(p.A); err == nil {
		t.Fatal("still in conns after Remove")
	}
}

// TestStoppedReaderUnbounded holds the limitation docs/design.md states
// ("Kernel forwarding", what the kernel does not do): with egress
// redirect, skbs for a peer whose send buffer is full wait in its psock
// queue, uncharged to any socket, and the sender's window stays open, so
// a peer that stops reading lets the other side queue far more than any
// socket buffer. When a kernel bounds that queue this test fails: then
// the docs (and kernel_forwarding's default) can change.
func TestStoppedReaderUnbounded(t *testing.T) {
	f := load(t)
	_, a := pair(t) // the client end reads nothing
	server, b := pair(t)
	if _, err := f.Add(a, b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	server.SetWriteDeadline(time.Now().Add(5 * time.Second))
	total := 0
	for total < 128<<20 {
		n, err := server.Write(buf)
		total += n
		if err != nil {
			break
		}
	}
	t.Logf("the sender wrote %d MiB while the receiver read nothing", total>>20)
	if total < 128<<20 {
		t.Fatalf("the kernel stopped the sender after %d MiB: the psock queue is bounded now; update docs/design.md", total>>20)
	}
}
