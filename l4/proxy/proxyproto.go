// PROXY protocol header (v1 text or v2 binary) sent to a backend first.
package proxy

import (
	"fmt"
	"net"
	"time"

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

// sendProxyHeader writes the PROXY header for flow to the backend before
// any client byte, so the backend learns the real client address.
func (s *TCPService) sendProxyHeader(c *tcpConn, version int, flow *l4.Flow) error {
	if version == 0 {
		return nil
	}
	h := proxyproto.HeaderProxyFromAddrs(byte(version),
		net.TCPAddrFromAddrPort(flow.Src), net.TCPAddrFromAddrPort(flow.Dst))
	_ = c.backend.SetWriteDeadline(time.Now().Add(s.settings.Load().ConnectTimeout))
	defer c.backend.SetWriteDeadline(time.Time{})
	if _, err := h.WriteTo(c.backend); err != nil {
		return fmt.Errorf("proxy header to %s: %w", c.target.ID, err)
	}
	return nil
}
