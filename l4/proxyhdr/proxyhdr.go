package proxyhdr

import (
	"encoding/binary"
	"net/netip"
	"strconv"
)

// MaxLen is the longest header: v1 with two full IPv6 addresses is 104
// bytes, v2 with them 52.
const MaxLen = 108

// V2Signature opens every v2 header.
const V2Signature = "\r\n\r\n\x00\r\nQUIT\n"

// Append appends the header of the given version (1 or 2) for a TCP
// connection from src to dst to b. Both addresses go as IPv4 when both
// are, else as IPv6 (an IPv4 one mapped). v2 sends the PROXY command, also
// for health checks: servers that tested only against balancers sending
// PROXY refuse LOCAL (HAProxy's pp2-never-send-local).
func Append(b []byte, version int, src, dst netip.AddrPort) []byte {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	v4 := sa.Is4() && da.Is4()
	if !v4 {
		sa, da = netip.AddrFrom16(sa.As16()), netip.AddrFrom16(da.As16())
	}
	if version == 1 {
		b = append(b, "PROXY TCP4 "...)
		if !v4 {
			b[len(b)-2] = '6'
		}
		b = sa.AppendTo(b)
		b = append(b, ' ')
		b = da.AppendTo(b)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(src.Port()), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(dst.Port()), 10)
		return append(b, '\r', '\n')
	}
	b = append(b, V2Signature...)
	b = append(b, 0x21) // version 2, PROXY command
	if v4 {
		b = append(b, 0x11, 0, 12) // TCP over IPv4, 12 address bytes
		s, d := sa.As4(), da.As4()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	} else {
		b = append(b, 0x21, 0, 36) // TCP over IPv6, 36 address bytes
		s, d := sa.As16(), da.As16()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}
