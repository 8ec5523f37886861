package proxy

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSockaddrRoundTrip(t *testing.T) {
	for _, s := range []string{"198.18.0.1:53", "[2001:db8::1]:5353", "0.0.0.0:0", "[::]:65535"} {
		a := netip.MustParseAddrPort(s)
		var sa unix.RawSockaddrInet6
		putSockaddr(&sa, a)
		if got := getSockaddr(&sa); got != a {
			t.Errorf("%s came back as %s", a, got)
		}
	}
}

func TestPktinfoRoundTrip(t *testing.T) {
	for _, s := range []string{"198.18.2.10", "2001:db8::10"} {
		a := netip.MustParseAddr(s)
		oob := make([]byte, oobSize)
		n := putPktinfo(oob, a)
		// What the kernel hands back for a received datagram carries the
		// destination in the address field, not the spec_dst one.
		if a.Is4() {
			copy(oob[unix.CmsgLen(0)+8:], a.AsSlice())
		}
		if got, ok := parsePktinfo(oob[:n]); !ok || got != a {
			t.Errorf("%s parsed as %s, %v", a, got, ok)
		}
	}
}

// FuzzParsePktinfo: whatever the control buffer holds, parsing never
// panics or reads past it.
func FuzzParsePktinfo(f *testing.F) {
	oob := make([]byte, oobSize)
	putPktinfo(oob, netip.MustParseAddr("2001:db8::10"))
	f.Add(oob)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		parsePktinfo(b)
	})
}
