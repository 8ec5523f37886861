//go:build !linux

// tcpinfo_other.go: no kernel RTT off Linux; the wall clock is used.

package health

import (
	"net"
	"time"
)

func kernelRTT(*net.TCPConn) (time.Duration, bool) { return 0, false }
