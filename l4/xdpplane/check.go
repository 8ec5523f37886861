// What `l4lb check` can tell about the XDP program on this host before
// `l4lb run` tries it: pin path, native XDP on loopback (IP forwarding:
// CheckForwarding).

package xdpplane

import (
	"fmt"
	"net"

	"github.com/l4lb/l4lb/bpf"
)

// CheckPinPath reports why o's pin path would make Start fail (nil: it
// would not, or there is none).
func CheckPinPath(o Options) error {
	if o.PinPath == "" {
		return nil
	}
	return bpf.CheckPinPath(o.PinPath)
}

// CheckAttach reports why one of o's interfaces cannot take the program
// in o's attach mode (nil: no reason known): a loopback interface has no
// native XDP.
func CheckAttach(o Options) error {
	for _, name := range o.Interfaces {
		if ifc, err := net.InterfaceByName(name); err == nil && ifc.Flags&net.FlagLoopback != 0 && o.Attach == bpf.AttachDriver {
			return fmt.Errorf("%s is a loopback interface, whose driver has no native XDP: `l4lb run` will fail to attach in driver mode; set attach = \"generic\"", name)
		}
	}
	return nil
}
