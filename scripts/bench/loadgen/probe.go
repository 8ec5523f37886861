package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"time"
)

// runProbe waits until the service at -addr answers one request of -kind,
// retrying until -timeout; it prints nothing on success.
func runProbe(args []string) (record, error) {
	var c common
	fs := newFlags("probe", &c)
	kind := fs.String("kind", "http", "http, echo, udp, pg, redis or ws")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	try := map[string]func(string) error{
		"http": probeHTTP, "echo": probeEcho, "udp": probeUDP, "pg": probePG, "redis": probeRedis, "ws": probeWS,
	}[*kind]
	if try == nil {
		return nil, fmt.Errorf("unknown -kind %q", *kind)
	}
	watchdog(*timeout + 5*time.Second)
	deadline := time.Now().Add(*timeout)
	for {
		err := try(c.addr)
		if err == nil {
			return nil, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s %s: no answer within %v: %w", *kind, c.addr, *timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func probeHTTP(addr string) error {
	_, err := oneHTTPConn(addr, time.Second, make([]byte, 4096))
	return err
}

func probeEcho(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	msg := []byte("probe-12")
	_, err = echoOnce(conn, msg, make([]byte, len(msg)), time.Second)
	return err
}

func probeUDP(addr string) error {
	conn, err := net.DialTimeout("udp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	msg := []byte("probe-12")
	_, err = echoOnce(conn, msg, make([]byte, len(msg)), 300*time.Millisecond)
	return err
}

// probePG sends PostgreSQL's SSLRequest (length 8, code 80877103), which
// any server answers with one byte, S or N, before any login: through a
// proxy that accepts before it dials, a bare connect proves nothing.
func probePG(addr string) error {
	return askTCP(addr, []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}, func(b []byte) bool {
		return b[0] == 'N' || b[0] == 'S'
	}, 1)
}

// probeRedis sends PING and wants +PONG.
func probeRedis(addr string) error {
	want := []byte("+PONG\r\n")
	return askTCP(addr, []byte("PING\r\n"), func(b []byte) bool { return bytes.Equal(b, want) }, len(want))
}

// askTCP connects, writes msg and checks the first n bytes of the reply.
func askTCP(addr string, msg []byte, ok func([]byte) bool, n int) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	reply := make([]byte, n)
	if _, err := io.ReadFull(conn, reply); err != nil {
		return err
	}
	if !ok(reply) {
		return fmt.Errorf("unexpected reply %q", reply)
	}
	return nil
}
