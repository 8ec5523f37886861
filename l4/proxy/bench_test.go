package proxy

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// ioCopyProxy is the plain proxy l4lb must beat: io.Copy per direction
// between raw *net.TCPConn (splice(2) inside Go's runtime).
func ioCopyProxy(t testing.TB, backend netip.AddrPort) netip.AddrPort {
	return startServer(t, func(c *net.TCPConn) {
		b, err := net.Dial("tcp4", backend.String())
		if err != nil {
			return
		}
		defer b.Close()
		done := make(chan struct{})
		go func() {
			io.Copy(c, b)
			c.CloseWrite()
			close(done)
		}()
		io.Copy(b, c)
		b.(*net.TCPConn).CloseWrite()
		<-done
	})
}

// benchPaths are the ways to reach backend compared by the benchmarks: no
// proxy, l4lb's splice forwarder and the plain io.Copy proxy.
func benchPaths(backend netip.AddrPort) map[string]func(testing.TB) netip.AddrPort {
	return map[string]func(testing.TB) netip.AddrPort{
		"direct": func(testing.TB) netip.AddrPort { return backend },
		"splice": func(t testing.TB) netip.AddrPort { return newService(t, Settings{}, backend).addr },
		"iocopy": func(t testing.TB) netip.AddrPort { return ioCopyProxy(t, backend) },
	}
}

// BenchmarkBulk moves bytes client -> backend through each kind of path on
// loopback: compare the MB/s of splice with io.Copy and with no proxy.
func BenchmarkBulk(b *testing.B) {
	sink := startServer(b, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	paths := benchPaths(sink)
	for _, name := range []string{"direct", "splice", "iocopy"} {
		b.Run(name, func(b *testing.B) {
			addr := paths[name](b)
			c, err := net.DialTimeout("tcp4", addr.String(), time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRoundTrip measures a small request/response on a persistent
// connection through each path.
func BenchmarkRoundTrip(b *testing.B) {
	echo := startServer(b, echoHandler)
	paths := benchPaths(echo)
	for _, name := range []string{"direct", "splice", "iocopy"} {
		b.Run(name, func(b *testing.B) {
			c, err := net.DialTimeout("tcp4", paths[name](b).String(), time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			msg, got := make([]byte, 100), make([]byte, 100)
			b.ResetTimer()
			for range b.N {
				c.Write(msg)
				if _, err := io.ReadFull(c, got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNewConnection measures a whole short connection through each
// path: connect, 100-byte request, reply, close. Allocations include the
// client's and the backend's own (the same in every path): compare the
// difference between paths.
func BenchmarkNewConnection(b *testing.B) {
	echo := startServer(b, func(c *net.TCPConn) {
		buf := make([]byte, 100)
		if _, err := io.ReadFull(c, buf); err == nil {
			c.Write(buf)
		}
	})
	paths := benchPaths(echo)
	for _, name := range []string{"direct", "splice", "iocopy"} {
		b.Run(name, func(b *testing.B) {
			addr := paths[name](b)
			msg, got := make([]byte, 100), make([]byte, 100)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(addr))
				if err != nil {
					b.Fatal(err)
				}
				c.Write(msg)
				if _, err := io.ReadFull(c, got); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
