// Socket calls without the allocations of their golang.org/x/sys/unix
// forms (which return and take socket addresses as interface values): the
// event loops make them for every connection.
package proxy

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// accept4 accepts a connection, non-blocking and close-on-exec, writing
// the client's address into sa.
func accept4(fd int, sa *unix.RawSockaddrInet6) (int, error) {
	for {
		size := uint32(unix.SizeofSockaddrInet6)
		nfd, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(&size)),
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
		_, _, errno := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(size))
		switch errno {
		case 0, unix.EINPROGRESS:
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}
