// Socket calls for the event loops, made as raw system calls: they never
// block (every descriptor is non-blocking), so telling Go's scheduler
// about each one (entersyscall/exitsyscall, about 4% of the CPU per
// connection and per request) buys nothing; and accept4 and connect
// without the socket-address allocations of their golang.org/x/sys/unix
// forms. epoll_wait, which blocks, keeps the ordinary path.

package proxy

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errnoErr returns err as an error, nil for 0.
func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// readRetry reads, retrying EINTR.
func readRetry(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// writeRetry writes, retrying EINTR.
func writeRetry(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	for {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(ptr), uintptr(len(p)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// spliceRetry splices up to n bytes without blocking, retrying EINTR.
func spliceRetry(from, to, n int) (int, error) {
	for {
		w, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(from), 0, uintptr(to), 0, uintptr(n),
			unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(w), nil
	}
}

// closeFD closes a descriptor (a socket closes in the background; with
// SO_LINGER 0 it resets at once).
func closeFD(fd int) {
	unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

// shutdownWrite sends a FIN.
func shutdownWrite(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), unix.SHUT_WR, 0)
	return errnoErr(e)
}

// setsockoptInt sets an integer socket option.
func setsockoptInt(fd, level, opt, value int) error {
	v := int32(value)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), 4, 0)
	return errnoErr(e)
}

// socketNB opens a non-blocking, close-on-exec socket.
func socketNB(family, typ, proto int) (int, error) {
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), uintptr(typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC), uintptr(proto))
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// epollCtl adds, changes or removes fd in an epoll set.
func epollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	return errnoErr(e)
}

// accept4 accepts a connection, non-blocking and close-on-exec, writing
// the client's address into sa.
func accept4(fd int, sa *unix.RawSockaddrInet6) (int, error) {
	for {
		size := uint32(unix.SizeofSockaddrInet6)
		nfd, _, errno := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(&size)),
			unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		switch errno {
		case 0:
			return int(nfd), nil
		case unix.EINTR:
			continue
		}
		return -1, errno
	}
}

// connectNB starts a connect; EINPROGRESS is the expected answer.
func connectNB(fd int, addr netip.AddrPort) error {
	var sa unix.RawSockaddrInet6
	if addr.Addr().Is4In6() {
		addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	}
	size := putSockaddr(&sa, addr)
	for {
		_, _, errno := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(size))
		switch errno {
		case 0, unix.EINPROGRESS:
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}

// SO_MEMINFO answers an array of skMeminfoVars counters (SK_MEMINFO_VARS
// in linux/sock_diag.h); skMeminfoDrops (SK_MEMINFO_DROPS) is the
// socket's sk_drops: datagrams the kernel dropped on their way into the
// socket, almost always for a full receive queue (rarely a bad checksum).
const (
	skMeminfoDrops = 8
	skMeminfoVars  = 9
)

// socketDrops returns how many datagrams the kernel dropped on their way
// into fd since it was opened (32 bits: it wraps).
func socketDrops(fd int) (uint64, error) {
	var mi [skMeminfoVars]uint32
	size := uint32(unsafe.Sizeof(mi))
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mi)), uintptr(unsafe.Pointer(&size)), 0)
	if e != 0 {
		return 0, e
	}
	if size <= skMeminfoDrops*4 {
		return 0, unix.EINVAL // a kernel without the drop count (before 4.2)
	}
	return uint64(mi[skMeminfoDrops]), nil
}
