// Socket options shared by listeners and backend connections.

package proxy

import (
	"net"
	"time"
)

// keepAliveConfig is the keepalive l4lb sets for an idle time: probes every
// quarter of it, four of them (0 = off).
func keepAliveConfig(idle time.Duration) net.KeepAliveConfig {
	if idle <= 0 {
		return net.KeepAliveConfig{Enable: false}
	}
	return net.KeepAliveConfig{Enable: true, Idle: idle, Interval: idle / 4, Count: 4}
}
