// Accepting a PROXY protocol header (v1 text or v2 binary) from a trusted
// balancer in front: a parser that works on the bytes received so far, so
// that a header arriving in pieces is parsed again as it grows, without
// allocating.

package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"unsafe"

	"github.com/l4lb/l4lb/l4"
)

// Accepted header versions (Settings.AcceptProxy): l4's values, under the
// names this package's code and tests use.
const (
	AcceptProxyOff = l4.AcceptProxyOff
	AcceptProxyV1  = l4.AcceptProxyV1
	AcceptProxyV2  = l4.AcceptProxyV2
	AcceptProxyAny = l4.AcceptProxyAny
)

// Bounds of an accepted header. v1's is the protocol's own (107 bytes
// with the CRLF). v2 allows 16 + 65535 bytes, but a header with TLVs a
// few hundred bytes long is already generous: l4lb refuses one longer
// than maxAcceptV2 (a documented limit), so that a client cannot make a
// connection hold kilobytes before it is forwarded.
const (
	maxAcceptV1 = 107
	maxAcceptV2 = 4096
	// maxAcceptHeader is the most a connection reads (peeks) looking for
	// its header.
	maxAcceptHeader = maxAcceptV2
)

// Header errors: each closes the connection, never forwarded.
var (
	errProxySignature = errors.New("proxy header: bad signature")
	errProxyTooLong   = errors.New("proxy header: too long")
	errProxyMalformed = errors.New("proxy header: malformed")
	errProxyFamily    = errors.New("proxy header: unsupported address family")
	errProxyTruncated = errors.New("proxy header: connection closed before the header completed")
	errProxyUntrusted = errors.New("proxy header: source not in accept_proxy_protocol_from")
	errProxyTimeout   = errors.New("proxy header: not complete within connect_timeout")
)

var proxyV1Prefix = []byte("PROXY ")

// parseProxyHeader parses the header at the start of b, the bytes
// received so far, accepting the versions mode allows (AcceptProxyV1, V2
// or Any). It returns the header's length n > 0 once b holds all of it,
// and the source address it carries (invalid for v2 LOCAL, v1 UNKNOWN
// or an address family without IP: keep the socket's own). n == 0 with
// no error means more bytes are needed. It allocates nothing.
func parseProxyHeader(b []byte, mode l4.ProxyAccept) (n int, src netip.AddrPort, err error) {
	if len(b) == 0 {
		return 0, src, nil
	}
	v1 := b[0] == 'P'
	if v1 && mode&AcceptProxyV1 == 0 || !v1 && mode&AcceptProxyV2 == 0 {
		return 0, src, errProxySignature
	}
	if v1 {
		return parseProxyV1(b)
	}
	return parseProxyV2(b)
}

// parseProxyV1: "PROXY TCP4|TCP6 src dst sport dport\r\n" or
// "PROXY UNKNOWN ...\r\n", at most 107 bytes.
func parseProxyV1(b []byte) (int, netip.AddrPort, error) {
	var none netip.AddrPort
	if k := min(len(b), len(proxyV1Prefix)); !bytes.Equal(b[:k], proxyV1Prefix[:k]) {
		return 0, none, errProxySignature
	}
	end := bytes.IndexByte(b[:min(len(b), maxAcceptV1)], '\n')
	if end < 0 {
		if len(b) >= maxAcceptV1 {
			return 0, none, errProxyTooLong
		}
		return 0, none, nil
	}
	if end == 0 || b[end-1] != '\r' {
		return 0, none, errProxyMalformed
	}
	line := b[len(proxyV1Prefix) : end-1]
	proto, line := cutField(line)
	switch string(proto) {
	case "UNKNOWN":
		return end + 1, none, nil
	case "TCP4", "TCP6":
	default:
		return 0, none, errProxyFamily
	}
	srcF, line := cutField(line)
	dstF, line := cutField(line)
	sportF, line := cutField(line)
	dportF, line := cutField(line)
	srcA, ok1 := parseV1Addr(srcF, proto[3] == '4')
	_, ok2 := parseV1Addr(dstF, proto[3] == '4')
	sport, ok3 := parseV1Port(sportF)
	_, ok4 := parseV1Port(dportF)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(line) != 0 {
		return 0, none, errProxyMalformed
	}
	return end + 1, netip.AddrPortFrom(srcA.Unmap(), sport), nil
}

// cutField splits b at its first space: a v1 header's fields are
// separated by exactly one.
func cutField(b []byte) (field, rest []byte) {
	i := bytes.IndexByte(b, ' ')
	if i < 0 {
		return b, nil
	}
	if i+1 == len(b) {
		return b[:i], b[i:] // a trailing space: rest stays non-empty, refused
	}
	return b[:i], b[i+1:]
}

// parseV1Addr parses a v1 address of the header's family. The string
// points into b without a copy: netip.ParseAddr keeps nothing of it when
// there is no zone, and a zone ('%') is refused first.
func parseV1Addr(b []byte, v4 bool) (netip.Addr, bool) {
	if len(b) == 0 || len(b) > 45 || bytes.IndexByte(b, '%') >= 0 {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(unsafe.String(&b[0], len(b)))
	if err != nil || a.Is4() != v4 {
		return netip.Addr{}, false
	}
	return a, true
}

// parseV1Port parses a decimal port, 0 to 65535, without a leading zero.
func parseV1Port(b []byte) (uint16, bool) {
	if len(b) == 0 || len(b) > 5 || len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > 65535 {
		return 0, false
	}
	return uint16(n), true
}

// parseProxyV2: the 12-byte signature, version and command, family and
// transport, the length of what follows (addresses, then TLVs, skipped).
func parseProxyV2(b []byte) (int, netip.AddrPort, error) {
	var none netip.AddrPort
	if k := min(len(b), len(proxyV2Signature)); !bytes.Equal(b[:k], proxyV2Signature[:k]) {
		return 0, none, errProxySignature
	}
	if len(b) > 12 && (b[12]>>4 != 2 || b[12]&0x0F > 1) {
		return 0, none, errProxyMalformed // version 2; command LOCAL (0) or PROXY (1)
	}
	if len(b) < 16 {
		return 0, none, nil
	}
	n := 16 + int(binary.BigEndian.Uint16(b[14:16]))
	if n > maxAcceptV2 {
		return 0, none, errProxyTooLong
	}
	family, transport := b[13]>>4, b[13]&0x0F
	if family > 3 || transport > 2 {
		return 0, none, errProxyFamily
	}
	if len(b) < n {
		return 0, none, nil
	}
	if b[12]&0x0F == 0 { // LOCAL: the balancer's own connection (a health check)
		return n, none, nil
	}
	if transport == 2 && family != 0 {
		return 0, none, errProxyFamily // a datagram flow on a stream connection
	}
	a := b[16:n]
	switch family {
	case 1: // AF_INET
		if len(a) < 12 {
			return 0, none, errProxyMalformed
		}
		return n, netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[0:4])), binary.BigEndian.Uint16(a[8:10])), nil
	case 2: // AF_INET6
		if len(a) < 36 {
			return 0, none, errProxyMalformed
		}
		ip := netip.AddrFrom16([16]byte(a[0:16])).Unmap()
		return n, netip.AddrPortFrom(ip, binary.BigEndian.Uint16(a[32:34])), nil
	}
	return n, none, nil // AF_UNSPEC or AF_UNIX: keep the socket's address
}
