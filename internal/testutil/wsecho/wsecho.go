package wsecho

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// guid is RFC 6455's key suffix.
const guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// Opcodes used here.
const (
	OpText  = 0x1
	OpClose = 0x8
	OpPing  = 0x9
	OpPong  = 0xA
)

// bufSize keeps per-connection memory small: messages here are short.
const bufSize = 512

func acceptKey(key string) string {
	sum := sha1.Sum([]byte(key + guid))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// Serve accepts on ln until it is closed, one goroutine per connection,
// answering upgrades as name and echoing every data frame.
func Serve(ln net.Listener, name string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = ServeConn(c, name)
		}()
	}
}

// ServeConn answers one client's upgrade and echoes its frames until a
// Close frame (answered) or an error.
func ServeConn(c net.Conn, name string) error {
	br := bufio.NewReaderSize(c, bufSize)
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	key := req.Header.Get("Sec-WebSocket-Key")
	if !strings.EqualFold(req.Header.Get("Upgrade"), "websocket") || key == "" {
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
		return errors.New("not a websocket upgrade")
	}
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Accept: "+acceptKey(key)+"\r\nX-Backend: "+name+"\r\n\r\n"); err != nil {
		return err
	}
	var out []byte
	for {
		op, payload, err := ReadFrame(br)
		if err != nil {
			return err
		}
		switch op {
		case OpClose:
			_, err := c.Write(AppendFrame(out[:0], OpClose, payload, false))
			return err
		case OpPing:
			op = OpPong
		}
		out = AppendFrame(out[:0], op, payload, false)
		if _, err := c.Write(out); err != nil {
			return err
		}
	}
}

// ReadFrame reads one frame, unmasking it if masked.
func ReadFrame(br *bufio.Reader) (op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return 0, nil, err
		}
		n = int(ext[0])<<8 | int(ext[1])
	case 127:
		return 0, nil, errors.New("wsecho: frame of 64 KiB or more")
	}
	var mask [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(br, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(br, payload); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
	}
	return h[0] & 0x0f, payload, nil
}

// AppendFrame appends one final frame (FIN set) to b; a client frame is
// masked with a fixed non-zero key (what the key is does not matter to a
// test, only that the server unmasks).
func AppendFrame(b []byte, op byte, payload []byte, mask bool) []byte {
	b = append(b, 0x80|op)
	m := byte(0)
	if mask {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, m|byte(n))
	default:
		b = append(b, m|126, byte(n>>8), byte(n))
	}
	if !mask {
		return append(b, payload...)
	}
	key := [4]byte{0x5a, 0x3c, 0x96, 0xe1}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

// Conn is a client's WebSocket connection.
type Conn struct {
	net.Conn
	Backend string // the server's X-Backend
	br      *bufio.Reader
	out     []byte
}

// Dial connects to addr (through whatever dialer's namespace the caller
// is in) and performs the upgrade, all within timeout.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	ws, err := Handshake(c, addr, time.Now().Add(timeout))
	if err != nil {
		c.Close()
		return nil, err
	}
	return ws, nil
}

// Handshake sends the upgrade request on c and checks the 101 answer.
func Handshake(c net.Conn, host string, deadline time.Time) (*Conn, error) {
	_ = c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	key := base64.StdEncoding.EncodeToString(raw[:])
	if _, err := io.WriteString(c, "GET /echo HTTP/1.1\r\nHost: "+host+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: "+key+"\r\nSec-WebSocket-Version: 13\r\n\r\n"); err != nil {
		return nil, fmt.Errorf("upgrade request: %w", err)
	}
	br := bufio.NewReaderSize(c, bufSize)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, fmt.Errorf("upgrade answer: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key) {
		return nil, fmt.Errorf("upgrade answer: %s, accept %q", resp.Status, resp.Header.Get("Sec-WebSocket-Accept"))
	}
	return &Conn{Conn: c, Backend: resp.Header.Get("X-Backend"), br: br}, nil
}

// Echo sends msg as a masked text frame and checks that the same payload
// comes back, all before deadline.
func (c *Conn) Echo(msg []byte, deadline time.Time) error {
	_ = c.SetDeadline(deadline)
	c.out = AppendFrame(c.out[:0], OpText, msg, true)
	if _, err := c.Write(c.out); err != nil {
		return err
	}
	op, got, err := ReadFrame(c.br)
	if err != nil {
		return err
	}
	if op != OpText || string(got) != string(msg) {
		return fmt.Errorf("echo: opcode %#x %q, want text %q", op, got, msg)
	}
	return nil
}

// CloseGracefully sends a Close frame, waits briefly for the server's, and closes.
func (c *Conn) CloseGracefully(wait time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write(AppendFrame(nil, OpClose, []byte{0x03, 0xe8}, true)); err == nil {
		_, _, _ = ReadFrame(c.br)
	}
	return c.Close()
}
