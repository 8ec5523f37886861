// PROXY protocol header (v1 text or v2 binary) sent to a backend first,
// so that it learns the real client address; written by l4/proxyhdr,
// which the health checks share.

package proxy

import (
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/proxyhdr"
)

// maxProxyHeader is the longest header sent.
const maxProxyHeader = proxyhdr.MaxLen

// proxyV2Signature opens every v2 header.
var proxyV2Signature = [12]byte([]byte(proxyhdr.V2Signature))

// appendProxyHeader appends flow's PROXY header of the given version
// (v1 or v2) to b, allocating nothing when b has room.
func appendProxyHeader(b []byte, version l4.ProxyVersion, flow *l4.Flow) []byte {
	return proxyhdr.Append(b, int(version), flow.Src, flow.Dst)
}
