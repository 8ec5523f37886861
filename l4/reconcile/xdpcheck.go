// What `l4lb check` can tell about the XDP fast path on this host before
// `l4lb run` tries it: pin path, IP forwarding, native XDP on loopback.

package reconcile

import (
	"fmt"
	"net"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
)

// CheckXDPHost returns a warning for each thing on this host that would
// make `l4lb run` fail to start the XDP program of cfg, each with its fix.
// It changes nothing, and says nothing when cfg loads no XDP program.
func CheckXDPHost(cfg *config.Config) []config.Problem {
	if cfg.XDP == nil || !cfg.AttachesXDP() {
		return nil
	}
	x := cfg.XDP
	var out []config.Problem
	warn := func(key, format string, args ...any) {
		out = append(out, config.Problem{File: cfg.Path, Line: cfg.KeyLine(key), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if x.PinPath != "" {
		if err := bpf.CheckPinPath(x.PinPath); err != nil {
			warn("xdp.pin_path", "`l4lb run` will fail: %v", err)
		}
	}
	if cfg.HasXDPVIP() {
		vips := make(map[l4.VIPKey]*config.VIP, len(cfg.VIPs))
		for i := range cfg.VIPs {
			vips[cfg.VIPs[i].Key()] = &cfg.VIPs[i]
		}
		if err := checkXDPForwarding(x.Interface, vips); err != nil {
			warn("xdp.interface", "`l4lb run` will refuse this config: %v", err)
		}
	}
	if ifc, err := net.InterfaceByName(x.Interface); err == nil && ifc.Flags&net.FlagLoopback != 0 && x.Attach == bpf.AttachDriver {
		warn("xdp.attach", "%s is a loopback interface, whose driver has no native XDP: `l4lb run` will fail to attach in driver mode; set attach = \"generic\"", x.Interface)
	}
	return out
}
