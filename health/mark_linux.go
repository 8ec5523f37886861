// mark_linux.go: the socket mark of routed check connections.

package health

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// markControl is a Dialer.Control that sets SO_MARK to mark.
func markControl(mark uint32) func(string, string, syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
		}); err != nil {
			return err
		}
		return serr
	}
}
