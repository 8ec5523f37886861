// Listening sockets for VIPs.

package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ListenOptions tune a VIP's socket.
type ListenOptions struct {
	// KeepAlive is set on a TCP listener, whose options accepted sockets
	// inherit, instead of with four setsockopt calls per accepted connection.
	KeepAlive net.KeepAliveConfig
	// Freebind (IP_FREEBIND) binds before the address is on an interface,
	// for keepalived or a BGP speaker that adds it later. Without it a
	// missing address fails at once, which catches a mistyped VIP.
	Freebind bool
	// ReusePort (UDP) opens the socket as the first of a SO_REUSEPORT
	// group, one socket per event loop. The address must be free: a
	// group would otherwise silently share it with another process.
	ReusePort bool
	// DeferAccept (TCP_DEFER_ACCEPT) makes accept return a connection
	// only once the client has sent data, or after about a second when it
	// sends nothing (see deferAcceptSeconds). TCP only.
	DeferAccept bool
}

// ListenTCP opens a VIP's listening socket.
func ListenTCP(addr netip.AddrPort, opts ListenOptions) (*net.TCPListener, error) {
	lc := net.ListenConfig{
		Control: func(network, _ string, c syscall.RawConn) error {
			if opts.Freebind {
				if err := freebind(network, c); err != nil {
					return err
				}
			}
			if opts.DeferAccept {
				if err := deferAcceptRaw(c, true); err != nil {
					return err
				}
			}
			if err := setNoDelayRaw(c); err != nil {
				return err
			}
			return setKeepAliveRaw(c, opts.KeepAlive)
		},
		KeepAlive: -1, // inherited from the listener, see above
	}
	// Plain TCP: Go listens with MPTCP by default where the kernel has it,
	// which costs every accept and poll more, and a VIP's clients gain
	// nothing from paths that end at the balancer.
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), tcpNetwork(addr.Addr()), addr.String())
	if err != nil {
		return nil, fmt.Errorf("listen tcp %s: %w", addr, err)
	}
	return ln.(*net.TCPListener), nil
}

// ListenUDP opens a VIP's datagram socket (opts.KeepAlive does not apply).
func ListenUDP(addr netip.AddrPort, opts ListenOptions) (*net.UDPConn, error) {
	var probe, lc net.ListenConfig
	probe.Control = func(network, _ string, c syscall.RawConn) error {
		if opts.Freebind {
			return freebind(network, c)
		}
		return nil
	}
	lc.Control = func(network, a string, c syscall.RawConn) error {
		if err := probe.Control(network, a, c); err != nil {
			return err
		}
		if opts.ReusePort {
			return setReusePort(c)
		}
		return nil
	}
	network := "udp4"
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		network = "udp6"
	}
	if opts.ReusePort {
		// A member of a SO_REUSEPORT group binds beside any other member
		// of the same user. Bind once without it first: that fails if
		// anything holds the address.
		pc, err := probe.ListenPacket(context.Background(), network, addr.String())
		if err != nil {
			return nil, fmt.Errorf("listen udp %s: %w", addr, err)
		}
		pc.Close()
	}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("listen udp %s: %w", addr, err)
	}
	return pc.(*net.UDPConn), nil
}

// setNoDelayRaw turns Nagle's delay off on a listener: accepted sockets
// inherit it (as they do keepalive), instead of one setsockopt per
// connection. A response that goes out in several writes must not wait
// for the client's delayed ACK.
func setNoDelayRaw(c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("TCP_NODELAY: %w", serr)
	}
	return nil
}

func setReusePort(c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_REUSEPORT: %w", serr)
	}
	return nil
}

// setKeepAliveRaw applies keepalive settings to a socket.
func setKeepAliveRaw(c syscall.RawConn, ka net.KeepAliveConfig) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		on := 0
		if ka.Enable {
			on = 1
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE, on)
		if serr != nil || !ka.Enable {
			return
		}
		for _, o := range []struct{ opt, val int }{
			{unix.TCP_KEEPIDLE, int(ka.Idle / time.Second)},
			{unix.TCP_KEEPINTVL, int(ka.Interval / time.Second)},
			{unix.TCP_KEEPCNT, ka.Count},
		} {
			if o.val > 0 && serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, o.opt, o.val)
			}
		}
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("keepalive: %w", serr)
	}
	return nil
}

func tcpNetwork(a netip.Addr) string {
	if a.Is6() && !a.Is4In6() {
		return "tcp6"
	}
	return "tcp4"
}

func freebind(network string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		if serr == nil && (network == "tcp6" || network == "udp6") {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
		}
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("IP_FREEBIND: %w", serr)
	}
	return nil
}

// deferAcceptSeconds is the TCP_DEFER_ACCEPT value, as nginx's `deferred`
// sets it. The kernel turns seconds into a count of SYN-ACK retransmits
// (1s: one, at the initial 1s timeout) and keeps a handshake whose client
// ACK carried no data in the SYN queue until that many have gone out; the
// client's ACK to the last one then completes it, data or not. So a
// client that waits for the server to speak first (MySQL, SMTP, FTP) is
// accepted, and its backend contacted, only about a second late.
const deferAcceptSeconds = 1

// deferAcceptRaw sets or clears TCP_DEFER_ACCEPT. It works on a socket
// that already listens (a reload that changes defer_accept): the value is
// read when each handshake's ACK arrives.
func deferAcceptRaw(c syscall.RawConn, on bool) error {
	var serr error
	err := c.Control(func(fd uintptr) { serr = setDeferAccept(int(fd), on) })
	if err != nil {
		return err
	}
	return serr
}

// setDeferAccept sets or clears TCP_DEFER_ACCEPT on fd.
func setDeferAccept(fd int, on bool) error {
	secs := 0
	if on {
		secs = deferAcceptSeconds
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, secs); err != nil {
		return fmt.Errorf("TCP_DEFER_ACCEPT %d: %w", secs, err)
	}
	return nil
}
