// PROXY protocol header (v1 text or v2 binary) sent to a backend first,
// so that it learns the real client address.
package proxy

import (
	"encoding/binary"
	"net/netip"
	"strconv"

	"github.com/l4lb/l4lb/l4"
)

// maxProxyHeader is the longest header: v1 with two full IPv6 addresses
// is 104 bytes, v2 with them 52.
const maxProxyHeader = 108

// proxyV2Signature opens every v2 header.
var proxyV2Signature = [12]byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A}

// appendProxyHeader appends flow's PROXY header of the given version
// (1 or 2) to b, allocating nothing when b has room. Both addresses go
// as IPv4 when both are, else as IPv6 (an IPv4 one mapped).
func appendProxyHeader(b []byte, version int, flow *l4.Flow) []byte {
	src, dst := flow.Src.Addr().Unmap(), flow.Dst.Addr().Unmap()
	v4 := src.Is4() && dst.Is4()
	if !v4 {
		src, dst = netip.AddrFrom16(src.As16()), netip.AddrFrom16(dst.As16())
	}
	if version == 1 {
		b = append(b, "PROXY TCP4 "...)
		if !v4 {
			b[len(b)-2] = '6'
		}
		b = src.AppendTo(b)
		b = append(b, ' ')
		b = dst.AppendTo(b)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(flow.Src.Port()), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(flow.Dst.Port()), 10)
		return append(b, '\r', '\n')
	}
	b = append(b, proxyV2Signature[:]...)
	b = append(b, 0x21) // version 2, PROXY command
	if v4 {
		b = append(b, 0x11, 0, 12) // TCP over IPv4, 12 address bytes
		s, d := src.As4(), dst.As4()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	} else {
		b = append(b, 0x21, 0, 36) // TCP over IPv6, 36 address bytes
		s, d := src.As16(), dst.As16()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, flow.Src.Port())
	return binary.BigEndian.AppendUint16(b, flow.Dst.Port())
}
