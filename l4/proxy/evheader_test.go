package proxy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/snapshot"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// recordServer is a backend that keeps everything each connection sent
// (until its FIN) and counts its connections.
func recordServer(t *testing.T) (netip.AddrPort, <-chan []byte, *atomic.Int64) {
	got := make(chan []byte, 16)
	var conns atomic.Int64
	addr := startServer(t, func(c *net.TCPConn) {
		conns.Add(1)
		b, _ := io.ReadAll(c)
		c.Write([]byte("ok"))
		got <- b
	})
	return addr, got, &conns
}

// TestAcceptProxyHeaderInPieces: a header sent a few bytes at a time,
// then data in the same write as the header's last piece; the backend
// gets the data byte-exact after l4lb's own v1 header, which carries the
// original client.
func TestAcceptProxyHeaderInPieces(t *testing.T) {
	for _, in := range [][]byte{
		[]byte("PROXY TCP4 203.0.113.7 198.18.0.10 40001 80\r\n"),
		hdr(2, "203.0.113.7:40001", "198.18.0.10:80"),
	} {
		addr, got, _ := recordServer(t)
		ts := newService(t, Settings{AcceptProxy: AcceptProxyAny, AcceptProxyFrom: loopback, ProxyProtocol: 1}, addr)
		c := ts.dial(t)
		payload := []byte("hello after the header")
		pieces := [][]byte{in[:1], in[1:7], in[7:13], in[13 : len(in)-1], append(in[len(in)-1:len(in):len(in)], payload...)}
		for _, p := range pieces {
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.CloseWrite()
		io.ReadAll(c)
		want := fmt.Sprintf("PROXY TCP4 203.0.113.7 127.0.0.1 40001 %d\r\n%s", ts.addr.Port(), payload)
		if b := within(t, got, "the backend's read"); string(b) != want {
			t.Fatalf("backend got %q\nwant %q", b, want)
		}
	}
}

// TestAcceptProxyThenBulk: megabytes right behind the header, in the
// same writes, reach the backend byte-exact, by splice.
func TestAcceptProxyThenBulk(t *testing.T) {
	const size = 8 << 20
	sums := make(chan [32]byte, 1)
	addr := startServer(t, func(c *net.TCPConn) {
		h := sha256.New()
		io.Copy(h, c)
		sums <- [32]byte(h.Sum(nil))
	})
	ts := newService(t, Settings{AcceptProxy: AcceptProxyV2, AcceptProxyFrom: loopback}, addr)
	c := ts.dial(t)
	c.Write(hdr(2, "[2001:db8::7]:40001", "[2001:db8::10]:80"))
	sent := sendRandom(c, size)
	c.CloseWrite()
	io.ReadAll(c)
	if got := within(t, sums, "the backend's checksum"); got != sent {
		t.Fatal("bytes after the header differ")
	}
	if in := ts.backends[0].Stats.BytesIn.Load(); in != size {
		t.Fatalf("moved %d bytes, want %d", in, size)
	}
	if n := ts.spliced.Load(); n == 0 {
		t.Fatal("no byte moved by splice")
	}
}

// TestAcceptProxyRefused: an untrusted source, a malformed header, a
// client that closes mid-header and one that never completes it are
// reset, counted, and never reach a backend.
func TestAcceptProxyRefused(t *testing.T) {
	good := []byte("PROXY TCP4 203.0.113.7 198.18.0.10 40001 80\r\nGET /")
	tests := []struct {
		name    string
		from    []netip.Prefix
		send    []byte
		fin     bool
		counter func(*ServiceStats) uint64
		end     l4.EndReason
	}{
		{"untrusted", []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, good, false, func(s *ServiceStats) uint64 { return s.ProxyUntrusted.Load() }, l4.EndProxyUntrusted},
		{"malformed", loopback, []byte("GET / HTTP/1.0\r\n\r\n"), false, func(s *ServiceStats) uint64 { return s.ProxyMalformed.Load() }, l4.EndProxyMalformed},
		{"wrong version", loopback, hdr(2, "203.0.113.7:1", "198.18.0.10:80"), false, func(s *ServiceStats) uint64 { return s.ProxyMalformed.Load() }, l4.EndProxyMalformed},
		{"closed mid-header", loopback, good[:20], true, func(s *ServiceStats) uint64 { return s.ProxyMalformed.Load() }, l4.EndProxyMalformed},
		{"timeout", loopback, good[:20], false, func(s *ServiceStats) uint64 { return s.ProxyTimeouts.Load() }, l4.EndProxyTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, _, conns := recordServer(t)
			ts := newService(t, Settings{AcceptProxy: AcceptProxyV1, AcceptProxyFrom: tc.from, ConnectTimeout: 300 * time.Millisecond}, addr)
			start := time.Now()
			err := sendUntilEnd(t, ts.addr, tc.send, tc.fin)
			if !isReset(err) {
				t.Fatalf("client: %v; want a reset", err)
			}
			testutil.Eventually(t, 2*time.Second, "refusal counted, connection ended", func() bool {
				return tc.counter(&ts.Stats) == 1 && ts.Stats.Active.Load() == 0
			})
			if tc.end == l4.EndProxyTimeout && time.Since(start) < 300*time.Millisecond {
				t.Fatalf("closed after %v, before connect_timeout", time.Since(start))
			}
			if n := conns.Load(); n != 0 {
				t.Fatalf("%d backend connections", n)
			}
		})
	}
}

// sendUntilEnd connects to addr, sends b (then a FIN if fin) and reads
// until the connection ends; the error says how (nothing may be read).
func sendUntilEnd(t *testing.T, addr netip.AddrPort, b []byte, fin bool) error {
	nc, err := net.DialTimeout("tcp4", addr.String(), 2*time.Second)
	if err != nil {
		return err // reset already (untrusted: at accept)
	}
	c := nc.(*net.TCPConn)
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		return err // the reset came first: the write took the error
	}
	if fin {
		c.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if len(got) != 0 {
		t.Fatalf("client read %q", got)
	}
	return err
}

// isReset: the error a reset gives the first read or write after it (a
// write after a FIN and no reset is taken; a read is an EOF).
func isReset(err error) bool { return errors.Is(err, unix.ECONNRESET) }

// TestAcceptProxyPicksByOriginalClient: with source_hash, connections
// from one real source with different original clients land per the
// original client's hash: each client always on one backend, both
// backends used.
func TestAcceptProxyPicksByOriginalClient(t *testing.T) {
	names := make([]netip.AddrPort, 2)
	for i := range names {
		id := byte('0' + i)
		names[i] = startServer(t, func(c *net.TCPConn) {
			io.ReadAll(c)
			c.Write([]byte{id})
		})
	}
	ts := newService(t, Settings{AcceptProxy: AcceptProxyAny, AcceptProxyFrom: loopback})
	var ms []balance.Member
	for i, a := range names {
		b := l4.NewBackend(l4.BackendID(fmt.Sprintf("b%d", i)), a, nil)
		ts.backends = append(ts.backends, b)
		ms = append(ms, balance.Member{Backend: b, Weight: 1})
	}
	snap, err := snapshot.Build(balance.Options{Algorithm: l4.SourceHash, HashKey: l4.HashSrcIP}, ms)
	if err != nil {
		t.Fatal(err)
	}
	ts.store.Store(snap)
	landed := map[byte]int{}
	for i := range 24 {
		client := fmt.Sprintf("203.0.113.%d", i+1)
		var first byte
		for k := range 3 {
			c := ts.dial(t)
			fmt.Fprintf(c, "PROXY TCP4 %s 198.18.0.10 %d 80\r\n", client, 40000+k)
			c.CloseWrite()
			b, _ := io.ReadAll(c)
			if len(b) != 1 {
				t.Fatalf("client %s: read %q", client, b)
			}
			if k == 0 {
				first = b[0]
				landed[first]++
			} else if b[0] != first {
				t.Fatalf("client %s on backend %c, then %c", client, first, b[0])
			}
		}
	}
	if len(landed) != 2 {
		t.Fatalf("24 original clients all on one backend: %v", landed)
	}
}

// TestSendProxyThenBulk: after the header l4lb sends, megabytes both
// ways move byte-exact, by splice.
func TestSendProxyThenBulk(t *testing.T) {
	const size = 8 << 20
	type got struct {
		header []byte
		sum    [32]byte
	}
	res := make(chan got, 1)
	addr := startServer(t, func(c *net.TCPConn) {
		h := make([]byte, 28) // v2, IPv4
		if _, err := io.ReadFull(c, h); err != nil {
			res <- got{}
			return
		}
		sum := sha256.New()
		io.CopyN(sum, c, size)
		sendRandom(c, size)
		c.CloseWrite()
		res <- got{h, [32]byte(sum.Sum(nil))}
	})
	ts := newService(t, Settings{ProxyProtocol: 2}, addr)
	c := ts.dial(t)
	sent := sendRandom(c, size)
	n, err := io.Copy(io.Discard, c)
	r := within(t, res, "the backend's checksum")
	if err != nil || n != size || r.sum != sent {
		t.Fatalf("read back %d bytes, %v; sent bytes arrived intact: %v", n, err, r.sum == sent)
	}
	want := hdr(2, c.LocalAddr().String(), ts.addr.String())
	if !bytes.Equal(r.header, want) {
		t.Fatalf("header %x, want %x", r.header, want)
	}
	if s := ts.spliced.Load(); s < size {
		t.Fatalf("%d bytes spliced of %d each way", s, size)
	}
}

// TestAcceptProxyExplain: explain lists an open connection under its
// original client.
func TestAcceptProxyExplain(t *testing.T) {
	ts := newService(t, Settings{AcceptProxy: AcceptProxyV1, AcceptProxyFrom: loopback}, startServer(t, echoHandler))
	c := ts.dial(t)
	c.Write([]byte("PROXY TCP4 203.0.113.7 198.18.0.10 40001 80\r\nping"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
		t.Fatalf("echo: %v", err)
	}
	got := ts.ConnsFrom(netip.MustParseAddr("203.0.113.7"), 40001, 10)
	if len(got) != 1 || got[0].Flow.Src != netip.MustParseAddrPort("203.0.113.7:40001") {
		t.Fatalf("explain lists %+v", got)
	}
	if real := ts.ConnsFrom(netip.MustParseAddr("127.0.0.1"), 0, 10); len(real) != 0 {
		t.Fatalf("explain lists the balancer's address: %+v", real)
	}
}

// TestAcceptProxyAffinity: affinity pins the original client, not the
// balancer in front: round robin alone would alternate.
func TestAcceptProxyAffinity(t *testing.T) {
	var addrs []netip.AddrPort
	for i := range 2 {
		id := byte('0' + i)
		addrs = append(addrs, startServer(t, func(c *net.TCPConn) { io.ReadAll(c); c.Write([]byte{id}) }))
	}
	ts := newService(t, Settings{AcceptProxy: AcceptProxyV1, AcceptProxyFrom: loopback, AffinityTimeout: time.Minute}, addrs...)
	landed := map[string]map[byte]bool{}
	for k := range 8 {
		client := []string{"203.0.113.7", "203.0.113.8"}[k/2%2] // A, A, B, B...: round robin alone splits each
		c := ts.dial(t)
		fmt.Fprintf(c, "PROXY TCP4 %s 198.18.0.10 %d 80\r\n", client, 40000+k)
		c.CloseWrite()
		b, _ := io.ReadAll(c)
		if len(b) != 1 {
			t.Fatalf("read %q", b)
		}
		if landed[client] == nil {
			landed[client] = map[byte]bool{}
		}
		landed[client][b[0]] = true
	}
	for client, bs := range landed {
		if len(bs) != 1 {
			t.Fatalf("client %s on backends %v", client, bs)
		}
	}
	if a := ts.Affinity(); a == nil {
		t.Fatal("no affinity table")
	} else if _, ok := a.Get(ts.key, netip.MustParseAddr("127.0.0.1")); ok {
		t.Fatal("the balancer's address was pinned")
	}
}
