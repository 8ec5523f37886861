package testutil

import (
	"io"
	"net"
)

// ServeConns accepts on ln until ln is closed, running handler on a
// goroutine of its own for each connection and closing the connection
// when handler returns.
func ServeConns(ln net.Listener, handler func(net.Conn)) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handler(c)
			}()
		}
	}()
}

// Echo is a ServeConns handler that sends back what it reads until EOF.
func Echo(c net.Conn) { _, _ = io.Copy(c, c) }

// NamedEcho is a ServeConns handler that first writes name and a newline
// (so a client learns which backend it reached), then echoes.
func NamedEcho(name string) func(net.Conn) {
	greeting := []byte(name + "\n")
	return func(c net.Conn) {
		if _, err := c.Write(greeting); err == nil {
			Echo(c)
		}
	}
}

// ServeDatagrams answers every datagram read on pc with reply(payload),
// sent back to where it came from, until pc is closed. payload is only
// valid during the call.
func ServeDatagrams(pc *net.UDPConn, reply func(payload []byte) []byte) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteToUDPAddrPort(reply(buf[:n]), from)
	}
}
