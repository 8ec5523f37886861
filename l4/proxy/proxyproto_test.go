package proxy

import (
	"bufio"
	"bytes"
	"net"
	"net/netip"
	"testing"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/l4lb/l4lb/l4"
)

// reference is the header go-proxyproto writes for flow.
func reference(t testing.TB, version l4.ProxyVersion, flow *l4.Flow) []byte {
	t.Helper()
	h := proxyproto.HeaderProxyFromAddrs(byte(version), net.TCPAddrFromAddrPort(flow.Src), net.TCPAddrFromAddrPort(flow.Dst))
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkHeader compares l4lb's header with the reference implementation's,
// byte for byte, and reads it back with that implementation's parser.
func checkHeader(t testing.TB, version l4.ProxyVersion, flow *l4.Flow) {
	t.Helper()
	got := appendProxyHeader(nil, version, flow)
	if want := reference(t, version, flow); !bytes.Equal(got, want) {
		t.Fatalf("v%d header for %v -> %v:\n got %q\nwant %q", version, flow.Src, flow.Dst, got, want)
	}
	if len(got) > maxProxyHeader {
		t.Fatalf("%d-byte header, longer than maxProxyHeader", len(got))
	}
	h, err := proxyproto.Read(bufio.NewReader(bytes.NewReader(got)))
	if err != nil {
		t.Fatalf("v%d header does not parse: %v", version, err)
	}
	src, dst := h.SourceAddr.(*net.TCPAddr).AddrPort(), h.DestinationAddr.(*net.TCPAddr).AddrPort()
	if src.Addr().Unmap() != flow.Src.Addr().Unmap() || src.Port() != flow.Src.Port() ||
		dst.Addr().Unmap() != flow.Dst.Addr().Unmap() || dst.Port() != flow.Dst.Port() {
		t.Fatalf("v%d header reads back as %v -> %v, want %v -> %v", version, src, dst, flow.Src, flow.Dst)
	}
}

func TestProxyHeaderMatchesReference(t *testing.T) {
	for _, tc := range []struct{ src, dst string }{
		{"198.18.0.1:40000", "198.18.1.10:5432"},
		{"0.0.0.0:0", "255.255.255.255:65535"},
		{"[2001:db8::1]:40000", "[2001:db8::10]:6379"},
		{"[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"},
		{"198.18.0.1:1", "[2001:db8::10]:443"}, // mixed families go as IPv6
	} {
		flow := l4.Flow{Src: netip.MustParseAddrPort(tc.src), Dst: netip.MustParseAddrPort(tc.dst), Proto: l4.TCP}
		for _, v := range []l4.ProxyVersion{l4.ProxyV1, l4.ProxyV2} {
			checkHeader(t, v, &flow)
		}
	}
}

func TestProxyHeaderAllocatesNothing(t *testing.T) {
	flow := l4.Flow{Src: netip.MustParseAddrPort("[2001:db8::1]:40000"), Dst: netip.MustParseAddrPort("[2001:db8::10]:6379"), Proto: l4.TCP}
	var buf [maxProxyHeader]byte
	for _, v := range []l4.ProxyVersion{l4.ProxyV1, l4.ProxyV2} {
		if n := testing.AllocsPerRun(100, func() { appendProxyHeader(buf[:0], v, &flow) }); n != 0 {
			t.Fatalf("v%d: %v allocations per header", v, n)
		}
	}
}

func FuzzProxyHeader(f *testing.F) {
	f.Add([]byte{198, 18, 0, 1}, []byte{198, 18, 1, 10}, uint16(40000), uint16(5432))
	f.Add(make([]byte, 16), bytes.Repeat([]byte{0xff}, 16), uint16(0), uint16(65535))
	f.Fuzz(func(t *testing.T, src, dst []byte, sport, dport uint16) {
		s, ok1 := netip.AddrFromSlice(src)
		d, ok2 := netip.AddrFromSlice(dst)
		if !ok1 || !ok2 {
			return
		}
		flow := l4.Flow{Src: netip.AddrPortFrom(s.Unmap(), sport), Dst: netip.AddrPortFrom(d.Unmap(), dport), Proto: l4.TCP}
		for _, v := range []l4.ProxyVersion{l4.ProxyV1, l4.ProxyV2} {
			checkHeader(t, v, &flow)
			checkParsesBack(t, v, &flow)
		}
	})
}

// checkParsesBack: l4lb's own parser (accept_proxy_protocol) reads the
// header l4lb writes as exactly its length and the flow's source, in the
// mode of its version and in "any", and asks for more on every prefix.
func checkParsesBack(t *testing.T, version l4.ProxyVersion, flow *l4.Flow) {
	t.Helper()
	h := appendProxyHeader(nil, version, flow)
	want := netip.AddrPortFrom(flow.Src.Addr().Unmap(), flow.Src.Port())
	for _, mode := range []l4.ProxyAccept{l4.ProxyAccept(version), AcceptProxyAny} {
		n, src, err := parseProxyHeader(append(h, "payload"...), mode)
		if err != nil || n != len(h) || netip.AddrPortFrom(src.Addr().Unmap(), src.Port()) != want {
			t.Fatalf("v%d header %q parses (mode %d) as n=%d of %d, %v, %v; want %v", version, h, mode, n, len(h), src, err, want)
		}
	}
	for k := range len(h) {
		if n, _, err := parseProxyHeader(h[:k], AcceptProxyAny); n != 0 || err != nil {
			t.Fatalf("v%d header cut at %d of %d: n=%d, %v", version, k, len(h), n, err)
		}
	}
}
