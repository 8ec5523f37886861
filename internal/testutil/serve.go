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
