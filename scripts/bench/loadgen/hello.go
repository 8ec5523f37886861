package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"
)

// capture is a net.Conn that keeps what a TLS client writes and ends its
// reads, so that its handshake stops after the ClientHello.
type capture struct {
	net.Conn
	b bytes.Buffer
}

func (c *capture) Write(p []byte) (int, error) { return c.b.Write(p) }
func (c *capture) Read([]byte) (int, error)    { return 0, io.EOF }
func (c *capture) Close() error                { return nil }

// clientHello returns the ClientHello crypto/tls sends for server name.
func clientHello(name string) []byte {
	var c capture
	_ = tls.Client(&c, &tls.Config{ServerName: name}).Handshake()
	return c.b.Bytes()
}

// helloConn makes connections that send hello to an echo server through
// the address and read it back whole: the same bytes whether the VIP
// routes by SNI or not, so the two differ only by the balancer's peek.
func helloConn(hello []byte) connFunc {
	return func(addr string, timeout time.Duration, buf []byte) (string, error) {
		conn, step, err := dialSend(addr, timeout, hello)
		if err != nil {
			return step, err
		}
		defer conn.Close()
		if len(buf) < len(hello) {
			buf = make([]byte, len(hello))
		}
		if _, err := io.ReadFull(conn, buf[:len(hello)]); err != nil {
			return "read", err
		}
		if !bytes.Equal(buf[:len(hello)], hello) {
			return "reply", fmt.Errorf("the echo differs from the ClientHello sent")
		}
		return "", nil
	}
}
