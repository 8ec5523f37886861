package proxy

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// socketPair returns a connected loopback TCP pair's two descriptors, with
// buffers large enough for the biggest chunk.
func socketPair(b *testing.B) (int, int) {
	b.Helper()
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		b.Fatal(err)
	}
	if err := unix.Listen(ln, 1); err != nil {
		b.Fatal(err)
	}
	sa, _ := unix.Getsockname(ln)
	a, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := unix.Connect(a, sa); err != nil {
		b.Fatal(err)
	}
	c, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	for _, fd := range []int{a, c} {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	b.Cleanup(func() { unix.Close(a); unix.Close(c) })
	return a, c
}

// BenchmarkChunk measures the one thing that differs between the two ways
// a loop moves a chunk that is already in a socket: read and write through
// a user-space buffer, or splice into a pipe and out. Each iteration sends
// size bytes into the source socket, moves them, and reads them out of the
// destination's peer; the sending and reading cost the same for both, so
// the difference between the two is the difference between the methods.
// The loops copy a chunk smaller than copyChunk and splice from there
// (going back to copying when a splice moves less than spliceMin).
//
//	go test -run '^$' -bench Chunk -benchtime 20000x -count 5 ./l4/proxy/
func BenchmarkChunk(b *testing.B) {
	for _, size := range []int{64, 512, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10} {
		for _, method := range []string{"copy", "splice"} {
			b.Run(fmt.Sprintf("%s/%d", method, size), func(b *testing.B) {
				sender, src := socketPair(b)
				dst, receiver := socketPair(b)
				msg, buf, sink := make([]byte, size), make([]byte, max(size, copyChunk)), make([]byte, size)
				pipes := NewPipePool(0)
				p, err := pipes.get(0)
				if err != nil {
					b.Fatal(err)
				}
				defer pipes.put(0, p)
				move := func() {
					for moved := 0; moved < size; {
						var n int
						var err error
						if method == "copy" {
							if n, err = unix.Read(src, buf[:size-moved]); err == nil {
								_, err = unix.Write(dst, buf[:n])
							}
						} else {
							var in int64
							if in, err = unix.Splice(src, nil, p.w, nil, size-moved, unix.SPLICE_F_MOVE); err == nil {
								n = int(in)
								_, err = unix.Splice(p.r, nil, dst, nil, n, unix.SPLICE_F_MOVE)
							}
						}
						if err != nil {
							b.Fatal(err)
						}
						moved += n
					}
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					if _, err := unix.Write(sender, msg); err != nil {
						b.Fatal(err)
					}
					move()
					for got := 0; got < size; {
						n, err := unix.Read(receiver, sink[got:])
						if err != nil {
							b.Fatal(err)
						}
						got += n
					}
				}
			})
		}
	}
}
