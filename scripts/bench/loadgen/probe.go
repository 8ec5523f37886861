package main

import (
	"fmt"
	"net"
	"time"
)

// runProbe waits until the service at -addr answers one request of -kind,
// retrying until -timeout; it prints nothing on success.
func runProbe(args []string) (record, error) {
	var c common
	fs := newFlags("probe", &c)
	kind := fs.String("kind", "http", "http, echo or udp")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	try := map[string]func(string) error{"http": probeHTTP, "echo": probeEcho, "udp": probeUDP}[*kind]
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
