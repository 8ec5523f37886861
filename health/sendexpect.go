// sendexpect.go: the send_expect check: write bytes, expect a prefix or a regular expression.

package health

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"regexp"
)

// maxReply bounds what send_expect reads while matching.
const maxReply = 4096

// sendExpectChecker writes send and reads until the reply starts with
// expect, matches re, or can no longer do so. With neither, a completed
// write passes.
type sendExpectChecker struct {
	connOpts
	send   []byte
	expect []byte
	re     *regexp.Regexp
}

func newSendExpect(s Spec) *sendExpectChecker {
	return &sendExpectChecker{
		connOpts: optsOf(s),
		send:     bytes.Clone(s.Send),
		expect:   bytes.Clone(s.Expect),
		re:       compileRegex(s.ExpectRegex),
	}
}

func (ch *sendExpectChecker) Check(ctx context.Context, addr netip.AddrPort) Result {
	return overConn(ctx, ch.connOpts, addr, ch.exchange)
}

// exchange sends the request and judges the reply.
func (ch *sendExpectChecker) exchange(p *probe, c net.Conn) {
	if len(ch.send) > 0 {
		if _, err := c.Write(ch.send); err != nil {
			p.failErr(err, "sending")
			return
		}
	}
	if len(ch.expect) == 0 && ch.re == nil {
		p.pass()
		return
	}
	fb := p.sent(c)
	ch.readReply(p, fb)
	p.replied(fb)
}

// readReply reads until the verdict is certain.
func (ch *sendExpectChecker) readReply(p *probe, fb *firstByte) {
	buf := make([]byte, 0, maxReply)
	for {
		n, err := fb.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if done := ch.judge(p, buf); done {
			return
		}
		if err != nil || len(buf) == cap(buf) {
			ch.mismatch(p, buf, err)
			return
		}
	}
}

// judge decides on the reply so far; false means "read more".
func (ch *sendExpectChecker) judge(p *probe, got []byte) bool {
	if ch.re != nil {
		if ch.re.Match(got) {
			p.pass()
			return true
		}
		return false
	}
	n := min(len(got), len(ch.expect))
	if !bytes.Equal(got[:n], ch.expect[:n]) {
		p.fail("reply %q does not start with %q", clip(got), clip(ch.expect))
		return true
	}
	if n == len(ch.expect) {
		p.pass()
		return true
	}
	return false
}

// mismatch words a reply that ended (or filled the buffer) unmatched.
func (ch *sendExpectChecker) mismatch(p *probe, got []byte, err error) {
	want := "expected reply"
	if ch.re != nil {
		want = "reply matching " + ch.re.String()
	}
	switch {
	case err == nil:
		p.fail("no %s in the first %d bytes: %q", want, len(got), clip(got))
	case len(got) == 0:
		p.failErr(err, "waiting for reply")
	default:
		p.fail("%s; got %q so far", p.describe(err, "waiting for "+want), clip(got))
	}
}

// clip shortens a reply for a reason string.
func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
