// http.go: the http check: GET expecting a status, or a WebSocket upgrade expecting 101.

package health

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
)

// wsGUID is the RFC 6455 constant that Sec-WebSocket-Accept hashes in.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// httpChecker writes the request by hand on the probe's own connection, so
// that Connect and FirstByte (the status line) are measured on the socket
// that carried them. A plain GET sends Connection: close and lets the
// server close first; a WebSocket probe ends with a Close frame (status
// 1000), as RFC 6455 asks, so the server logs a normal closure.
type httpChecker struct {
	connOpts
	path   string
	host   string
	status int
	ws     bool
}

func newHTTP(s Spec) *httpChecker {
	status := s.Status
	if status == 0 {
		status = 200
	}
	return &httpChecker{connOpts: optsOf(s), path: s.Path, host: s.Host, status: status, ws: s.WebSocket}
}

func (ch *httpChecker) Check(ctx context.Context, addr netip.AddrPort) Result {
	return overConn(ctx, ch.connOpts, addr, func(p *probe, c net.Conn) { ch.exchange(p, c, addr) })
}

// exchange sends the request and judges the response head.
func (ch *httpChecker) exchange(p *probe, c net.Conn, addr netip.AddrPort) {
	req, key := ch.request(addr)
	if _, err := c.Write(req); err != nil {
		p.failErr(err, "sending request")
		return
	}
	p.serverCloses = !ch.ws // Connection: close
	fb := p.sent(c)
	tp := textproto.NewReader(bufio.NewReaderSize(&capReader{r: fb, left: maxHead}, 2048))
	line, err := tp.ReadLine()
	p.replied(fb)
	if err != nil {
		p.failErr(err, "waiting for status line")
		return
	}
	code, ok := parseStatusLine(line)
	switch {
	case !ok:
		p.fail("malformed status line %q (not HTTP?)", clip([]byte(line)))
	case ch.ws:
		ch.judgeUpgrade(p, c, tp, code, key)
	case code != ch.status:
		p.fail("unexpected status %d, want %d", code, ch.status)
	default:
		p.pass()
	}
}

// request renders the GET or the WebSocket upgrade and returns the key sent.
func (ch *httpChecker) request(addr netip.AddrPort) ([]byte, string) {
	host := ch.host
	if host == "" {
		host = addr.String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: l4lb-health\r\n", ch.path, host)
	if !ch.ws {
		b.WriteString("Accept: */*\r\nConnection: close\r\n\r\n")
		return []byte(b.String()), ""
	}
	key := wsKey()
	fmt.Fprintf(&b, "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
	return []byte(b.String()), key
}

// judgeUpgrade checks the 101 answer and its headers, then sends Close.
func (ch *httpChecker) judgeUpgrade(p *probe, c net.Conn, tp *textproto.Reader, code int, key string) {
	if code != 101 {
		p.fail("websocket upgrade refused: status %d, want 101", code)
		return
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		p.failErr(err, "reading upgrade headers")
		return
	}
	if !strings.EqualFold(hdr.Get("Upgrade"), "websocket") {
		p.fail("101 without Upgrade: websocket (got %q)", hdr.Get("Upgrade"))
		return
	}
	if got := hdr.Get("Sec-WebSocket-Accept"); got != wsAccept(key) {
		p.fail("bad Sec-WebSocket-Accept %q", got)
		return
	}
	p.pass()
	if _, err := c.Write(wsCloseFrame()); err == nil {
		p.serverCloses = true // RFC 6455: the server answers Close and closes first
	}
}

// maxHead bounds the status line and headers a probe reads.
const maxHead = 16 << 10

// errHeadTooLarge ends a response head longer than maxHead.
var errHeadTooLarge = errors.New("response head over 16 KiB")

// capReader fails with errHeadTooLarge after left bytes, so a server that
// streams an endless line cannot grow the probe's memory until timeout.
type capReader struct {
	r    io.Reader
	left int
}

func (c *capReader) Read(b []byte) (int, error) {
	if c.left <= 0 {
		return 0, errHeadTooLarge
	}
	n, err := c.r.Read(b[:min(len(b), c.left)])
	c.left -= n
	return n, err
}

// parseStatusLine returns the code of "HTTP/1.x NNN reason".
func parseStatusLine(line string) (int, bool) {
	proto, rest, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/") || len(rest) < 3 {
		return 0, false
	}
	code, err := strconv.Atoi(rest[:3])
	if err != nil || code < 100 || code > 999 || (len(rest) > 3 && rest[3] != ' ') {
		return 0, false
	}
	return code, true
}

// wsKey returns a fresh random Sec-WebSocket-Key.
func wsKey() string {
	var k [16]byte
	_, _ = rand.Read(k[:]) // crypto/rand.Read never fails on Linux
	return base64.StdEncoding.EncodeToString(k[:])
}

// wsAccept is the Sec-WebSocket-Accept a server must answer for key.
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// wsCloseFrame is a masked client Close frame with status 1000 (normal).
func wsCloseFrame() []byte {
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	payload := []byte{0x03, 0xe8}
	f := []byte{0x88, 0x80 | byte(len(payload)), mask[0], mask[1], mask[2], mask[3]}
	for i, b := range payload {
		f = append(f, b^mask[i%4])
	}
	return f
}
