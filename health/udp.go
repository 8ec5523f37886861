// udp.go: the udp and dns checks: one datagram sent, a reply datagram judged.

package health

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// maxDatagram bounds a reply read by the udp and dns checks.
const maxDatagram = 64 << 10

// udpChecker sends one datagram and judges the replies: the udp check
// (judge: a prefix or a regular expression; neither: any reply) and the
// dns check (a query with a fresh ID; a reply with that ID, QR set and
// RCODE NOERROR). Replies a judge rejects as not meant for the probe (a
// DNS reply with another ID) are skipped; the first one it accepts or
// refuses decides. A UDP service answers nothing to a datagram it drops,
// so silence until the timeout fails, and so does an ICMP port
// unreachable ("connect refused", reported by the kernel on the
// connected socket).
type udpChecker struct {
	// request makes the datagram of one check and the judge of its
	// replies: done reports whether the reply decides (then err is
	// the failure, nil for a pass).
	request func() ([]byte, func(reply []byte) (done bool, err error), error)
	opts    connOpts // its timeout and route (a PROXY header is never sent)
}

func newUDP(s Spec) *udpChecker {
	send, expect, re := bytes.Clone(s.Send), bytes.Clone(s.Expect), compileRegex(s.ExpectRegex)
	req := func() ([]byte, func([]byte) (bool, error), error) {
		return send, func(reply []byte) (bool, error) { return true, matchDatagram(reply, expect, re) }, nil
	}
	return &udpChecker{request: req, opts: optsOf(s)}
}

// matchDatagram judges a udp check's reply.
func matchDatagram(reply, expect []byte, re *regexp.Regexp) error {
	switch {
	case re != nil && !re.Match(reply):
		return fmt.Errorf("reply %q does not match %s", clip(reply), re)
	case len(expect) > 0 && !bytes.HasPrefix(reply, expect):
		return fmt.Errorf("reply %q does not start with %q", clip(reply), clip(expect))
	}
	return nil
}

func newDNS(s Spec) *udpChecker {
	qtype := s.DNSType
	if qtype == 0 {
		qtype = dns.TypeA
	}
	name := dns.Fqdn(s.DNSName)
	req := func() ([]byte, func([]byte) (bool, error), error) {
		var id [2]byte
		if _, err := rand.Read(id[:]); err != nil {
			return nil, nil, fmt.Errorf("query ID: %w", err)
		}
		q := new(dns.Msg)
		q.SetQuestion(name, qtype)
		q.Id = binary.BigEndian.Uint16(id[:])
		b, err := q.Pack()
		if err != nil {
			return nil, nil, fmt.Errorf("packing the query for %s: %w", name, err)
		}
		return b, func(reply []byte) (bool, error) { return judgeDNS(reply, q) }, nil
	}
	return &udpChecker{request: req, opts: optsOf(s)}
}

// judgeDNS judges a reply to q: one with another ID, or that is no
// response, is not for this probe (skipped); a response must answer q's
// question with RCODE NOERROR.
func judgeDNS(reply []byte, q *dns.Msg) (bool, error) {
	if len(reply) < 12 || binary.BigEndian.Uint16(reply) != q.Id || reply[2]&0x80 == 0 {
		return false, nil
	}
	var m dns.Msg
	if err := m.Unpack(reply); err != nil {
		return true, fmt.Errorf("reply is not a DNS message: %v", err)
	}
	if len(m.Question) != 1 || !dns.IsSubDomain(m.Question[0].Name, q.Question[0].Name) || m.Question[0].Qtype != q.Question[0].Qtype {
		return true, fmt.Errorf("reply answers another question (%v)", m.Question)
	}
	if m.Rcode != dns.RcodeSuccess {
		return true, fmt.Errorf("rcode %s for %s %s", dns.RcodeToString[m.Rcode], q.Question[0].Name, dns.TypeToString[q.Question[0].Qtype])
	}
	return true, nil
}

func (ch *udpChecker) Check(ctx context.Context, addr netip.AddrPort) Result {
	p := begin(ctx, ch.opts)
	defer p.cancel()
	err := ch.exchange(p, addr)
	if err == nil {
		p.pass()
	} else {
		p.fail("%s", err)
	}
	p.res.Took = time.Since(p.res.Start)
	return p.res
}

// exchange sends the datagram and reads replies until one decides.
func (ch *udpChecker) exchange(p *probe, addr netip.AddrPort) error {
	req, judge, err := ch.request()
	if err != nil {
		return err
	}
	d := net.Dialer{}
	if !ch.opts.route.IsZero() {
		addr = routed(&d, addr, ch.opts.route)
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(ch.opts.route.Source.Unmap(), 0))
	}
	c, err := d.DialContext(p.ctx, "udp", netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()).String())
	if err != nil {
		return errors.New(p.describe(err, "opening the socket"))
	}
	defer c.Close()
	if dl, ok := p.ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(p.ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	sent := time.Now()
	if _, err := c.Write(req); err != nil {
		return errors.New(p.describe(err, "sending"))
	}
	buf := make([]byte, maxDatagram)
	for {
		n, err := c.Read(buf)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				return errors.New("port unreachable (ICMP)")
			}
			return errors.New(p.describe(err, "waiting for a reply"))
		}
		if p.res.FirstByte == 0 {
			p.res.FirstByte = max(time.Since(sent), 1)
		}
		if done, err := judge(buf[:n]); done {
			return err
		}
	}
}
