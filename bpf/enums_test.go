// The C enums and Go's vocabulary agree (no privileges needed).

package bpf

import (
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// TestEnumsMatchC: the program reads l4.HashKey and l4.Forward values
// straight from the vips map, so their numbers must be the C's.
func TestEnumsMatchC(t *testing.T) {
	for _, c := range []struct {
		name    string
		goV, cV uint32
	}{
		{"hash src_ip", uint32(l4.HashSrcIP), uint32(lbHashKeyHASH_SRC_IP)},
		{"hash src_ip_port", uint32(l4.HashSrcIPPort), uint32(lbHashKeyHASH_SRC_IP_PORT)},
		{"hash 5tuple", uint32(l4.HashFiveTuple), uint32(lbHashKeyHASH_FIVE_TUPLE)},
		{"forward ipip", uint32(l4.ForwardIPIP), uint32(lbForwardFORWARD_IPIP)},
		{"forward l2", uint32(l4.ForwardL2), uint32(lbForwardFORWARD_L2)},
		{"forward gue", uint32(l4.ForwardGUE), uint32(lbForwardFORWARD_GUE)},
		{"proto tcp", uint32(l4.TCP), 6},
		{"proto udp", uint32(l4.UDP), 17},
	} {
		if c.goV != c.cV {
			t.Errorf("%s: Go %d, C %d", c.name, c.goV, c.cV)
		}
	}
}
