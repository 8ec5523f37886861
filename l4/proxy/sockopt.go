// Socket options shared by listeners and backend connections.
package proxy

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

func keepAliveConfig(idle time.Duration) net.KeepAliveConfig {
	if idle <= 0 {
		return net.KeepAliveConfig{Enable: false}
	}
	return net.KeepAliveConfig{Enable: true, Idle: idle, Interval: idle / 4, Count: 4}
}

func setKeepAlive(c *net.TCPConn, idle time.Duration) {
	if idle <= 0 {
		_ = c.SetKeepAlive(false)
		return
	}
	_ = c.SetKeepAliveConfig(keepAliveConfig(idle))
}

// handshakeRTT returns the kernel's RTT estimate right after connect, which
// is the SYN to SYN-ACK time measured by the TCP stack itself, or wall when
// TCP_INFO is not available.
func handshakeRTT(c *net.TCPConn, wall time.Duration) time.Duration {
	raw, err := c.SyscallConn()
	if err != nil {
		return wall
	}
	var rtt time.Duration
	_ = raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil && info.Rtt > 0 {
			rtt = time.Duration(info.Rtt) * time.Microsecond
		}
	})
	if rtt == 0 {
		return wall
	}
	return rtt
}
