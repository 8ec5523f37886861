// PROXY protocol header (v1 text or v2 binary) sent to a backend first.
package proxy

import (
	"net"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/l4lb/l4lb/l4"
)

// proxyHeader is the PROXY header (version 1 or 2) for flow.
func proxyHeader(version int, flow *l4.Flow) []byte {
	h := proxyproto.HeaderProxyFromAddrs(byte(version),
		net.TCPAddrFromAddrPort(flow.Src), net.TCPAddrFromAddrPort(flow.Dst))
	b, err := h.Format()
	if err != nil {
		return nil
	}
	return b
}
