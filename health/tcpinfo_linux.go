// tcpinfo_linux.go: the kernel's handshake RTT from TCP_INFO.

package health

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// kernelRTT reads tcpi_rtt from a freshly connected socket. Right after the
// handshake the kernel's smoothed RTT holds exactly one sample, the SYN to
// SYN-ACK time, measured in microseconds without scheduler noise. It is 0
// when the kernel had no usable sample (below 1 µs, or a retransmitted SYN
// without timestamps); the caller then falls back to the wall clock.
func kernelRTT(c *net.TCPConn) (time.Duration, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var gerr error
	err = rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if err != nil || gerr != nil || info.Rtt == 0 {
		return 0, false
	}
	return time.Duration(info.Rtt) * time.Microsecond, true
}
