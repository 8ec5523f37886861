// What `l4lb check` asks of the loop beyond the config's own validation:
// modes this runtime cannot run, and what the XDP program would meet on
// this host.

package reconcile

import (
	"fmt"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/xdpplane"
)

// errModeUnavailable: the mode is valid config but this runtime cannot run it.
var errModeUnavailable = fmt.Errorf("not available in this version of l4lb")

// CheckModes reports VIPs whose mode this runtime cannot run, as config
// problems, so that `l4lb check` refuses what `run` would refuse.
func CheckModes(cfg *config.Config) []config.Problem {
	var out []config.Problem
	for i := range cfg.VIPs {
		v := &cfg.VIPs[i]
		if v.Mode != l4.ModeProxy && v.Mode != l4.ModeXDP {
			out = append(out, config.Problem{File: cfg.Path, Line: v.Line, VIP: v.Name, Key: fmt.Sprintf("vip[%d].mode", i),
				Msg: fmt.Sprintf("mode %s is %s; use mode = \"proxy\"", v.Mode, errModeUnavailable)})
		}
	}
	return out
}

// CheckXDPHost returns a warning for each thing on this host that would
// make `l4lb run` fail to start the XDP program of cfg, each with its fix.
// It changes nothing, and says nothing when cfg loads no XDP program.
func CheckXDPHost(cfg *config.Config) []config.Problem {
	if cfg.XDP == nil || !cfg.AttachesXDP() {
		return nil
	}
	o := xdpOptions(cfg.XDP)
	var out []config.Problem
	warn := func(key, format string, args ...any) {
		out = append(out, config.Problem{File: cfg.Path, Line: cfg.KeyLine(key), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if err := xdpplane.CheckPinPath(o); err != nil {
		warn("xdp.pin_path", "`l4lb run` will fail: %v", err)
	}
	if cfg.HasXDPVIP() {
		vips := make(map[l4.VIPKey]*config.VIP, len(cfg.VIPs))
		for i := range cfg.VIPs {
			vips[cfg.VIPs[i].Key()] = &cfg.VIPs[i]
		}
		if err := checkXDPForwarding(o.Interfaces, vips); err != nil {
			warn("xdp.interface", "`l4lb run` will refuse this config: %v", err)
		}
	}
	if err := xdpplane.CheckAttach(o); err != nil {
		warn("xdp.attach", "%v", err)
	}
	return out
}
