// Loading the verdict program and adding, removing and reading socket pairs.

package sockfwd

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// ErrNotSupported: the kernel cannot load or attach the program (no BPF,
// no sockmap, no privilege).
var ErrNotSupported = errors.New("kernel forwarding not supported")

// Forwarder is the loaded program and its two maps. Its methods are safe
// for concurrent use (each is a map syscall or two).
type Forwarder struct {
	objs fwdObjects

	mu     sync.Mutex
	closed bool
}

// Dir is one socket's direction as the program counts it: bytes it
// received and redirected to its peer, and when the last skb came
// (CLOCK_MONOTONIC nanoseconds, coarse; 0 = none yet).
type Dir struct {
	Bytes  uint64
	LastNs int64
}

// Pair names a forwarded connection's two sockets by their cookies.
type Pair struct{ A, B uint64 }

// Load loads the program and attaches it to its map as the stream verdict.
func Load() (*Forwarder, error) {
	f := &Forwarder{}
	if err := loadFwdObjects(&f.objs, nil); err != nil {
		return nil, fmt.Errorf("%w: load sk_skb program: %w", ErrNotSupported, err)
	}
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{
		Target: f.objs.Socks.FD(), Program: f.objs.SkSkbFwd, Attach: ebpf.AttachSkSKBStreamVerdict,
	}); err != nil {
		f.objs.Close()
		return nil, fmt.Errorf("%w: attach stream verdict: %w", ErrNotSupported, err)
	}
	return f, nil
}

// Close detaches the program and closes the maps; sockets still in the
// map leave it (whatever waits in their psock queues is dropped).
func (f *Forwarder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	_ = link.RawDetachProgram(link.RawDetachProgramOptions{
		Target: f.objs.Socks.FD(), Program: f.objs.SkSkbFwd, Attach: ebpf.AttachSkSKBStreamVerdict,
	})
	return f.objs.Close()
}

// Cookie is a socket's cookie (SO_COOKIE).
func Cookie(fd int) (uint64, error) {
	v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("SO_COOKIE: %w", err)
	}
	return v, nil
}

// Add puts the connected TCP sockets a and b into the map: from then on
// bytes that arrive on a go out of b and the reverse. The caller must
// have written on everything it read from either. On error neither is in
// the map.
func (f *Forwarder) Add(a, b int) (Pair, error) {
	var p Pair
	var err error
	if p.A, err = Cookie(a); err != nil {
		return p, err
	}
	if p.B, err = Cookie(b); err != nil {
		return p, err
	}
	if err = f.objs.Conns.Put(p.A, fwdConnDir{Peer: p.B}); err != nil {
		return p, fmt.Errorf("conns: %w", err)
	}
	if err = f.objs.Conns.Put(p.B, fwdConnDir{Peer: p.A}); err != nil {
		f.Remove(p)
		return p, fmt.Errorf("conns: %w", err)
	}
	// Both into peers first: once a socket is in socks its skbs are
	// redirected, and a redirect to a socket not (yet) in peers drops.
	for _, m := range [2]*ebpf.Map{f.objs.Peers, f.objs.Socks} {
		if err = m.Put(p.A, uint32(a)); err == nil {
			err = m.Put(p.B, uint32(b))
		}
		if err != nil {
			f.Remove(p)
			return p, fmt.Errorf("%s: %w", m, err)
		}
	}
	kick(a)
	kick(b)
	return p, nil
}

// kick makes the kernel run fd's data_ready now, so that bytes that came
// between the caller's last read and Add are forwarded without waiting
// for the next skb (tcp_set_rcvlowat calls tcp_data_ready).
func kick(fd int) { _ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) }

// Remove takes p's sockets out of the maps (closing a socket takes it
// out of socks and peers by itself; conns needs Remove).
func (f *Forwarder) Remove(p Pair) {
	for _, c := range [2]uint64{p.A, p.B} {
		_ = f.objs.Socks.Delete(c)
		_ = f.objs.Peers.Delete(c)
		_ = f.objs.Conns.Delete(c)
	}
}

// Read returns the direction of the socket with cookie c.
func (f *Forwarder) Read(c uint64) (Dir, error) {
	var v fwdConnDir
	if err := f.objs.Conns.Lookup(c, &v); err != nil {
		return Dir{}, fmt.Errorf("conns %d: %w", c, err)
	}
	return Dir{Bytes: v.Bytes, LastNs: int64(v.LastNs)}, nil
}
