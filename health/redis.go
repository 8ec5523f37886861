// redis.go: the redis check: optional AUTH, PING expecting +PONG, then QUIT.

package health

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// redisChecker pipelines [AUTH] PING QUIT in one write, so a check costs
// one round trip, and the server closes first after +OK to QUIT (the
// TIME_WAIT stays on the server). Commands are RESP arrays, so passwords
// may hold spaces.
type redisChecker struct {
	connOpts
	request []byte
	auth    bool
}

func newRedis(s Spec) *redisChecker {
	var req []byte
	switch {
	case s.Password != "" && s.User != "":
		req = respCommand(req, "AUTH", s.User, s.Password)
	case s.Password != "":
		req = respCommand(req, "AUTH", s.Password)
	}
	req = respCommand(req, "PING")
	req = respCommand(req, "QUIT")
	return &redisChecker{connOpts: optsOf(s), request: req, auth: s.Password != ""}
}

// respCommand appends one RESP array of bulk strings.
func respCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

func (ch *redisChecker) Check(ctx context.Context, addr netip.AddrPort) Result {
	// The polite close's drain reads QUIT's +OK and the server's FIN.
	return overConn(ctx, ch.connOpts, addr, ch.exchange)
}

// exchange sends the pipeline and judges the replies in order.
func (ch *redisChecker) exchange(p *probe, c net.Conn) {
	if _, err := c.Write(ch.request); err != nil {
		p.failErr(err, "sending PING")
		return
	}
	p.serverCloses = true // QUIT is in the pipeline
	fb := p.sent(c)
	defer p.replied(fb)
	br := bufio.NewReaderSize(fb, 512)
	if ch.auth {
		line, err := readLine(br)
		if err != nil {
			p.failErr(err, "waiting for AUTH reply")
			return
		}
		if line != "+OK" {
			p.fail("AUTH refused: %s", strings.TrimPrefix(line, "-"))
			return
		}
	}
	ch.judgePing(p, br)
}

// judgePing reads PING's reply.
func (ch *redisChecker) judgePing(p *probe, br *bufio.Reader) {
	line, err := readLine(br)
	switch {
	case err != nil:
		p.failErr(err, "waiting for PING reply")
	case line == "+PONG":
		p.pass()
	case strings.HasPrefix(line, "-"):
		p.fail("PING refused: %s", line[1:])
	default:
		p.fail("unexpected reply %q to PING (not Redis?)", clip([]byte(line)))
	}
}

// errLongLine reports a reply line longer than any Redis status line.
var errLongLine = errors.New("reply line too long (not Redis?)")

// readLine reads one CRLF-terminated reply line without its terminator.
func readLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", errLongLine
	}
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(line), "\r\n"), nil
}
