// drop_capabilities: what the daemon keeps once its VIPs listen and its
// XDP program is attached, and the drop itself.

package daemon

import (
	"go.uber.org/zap"
	"kernel.org/pub/linux/libs/security/libcap/cap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/privs"
	"github.com/l4lb/l4lb/l4/plane"
)

// keptCapabilities is what a running l4lb still uses. Found by running
// each mode through the binary with less (cmd/l4lb/e2e_privs_test.go and
// TestXDPModeChange, kernel 6.18), not by guessing:
//   - cap_net_bind_service: a reload that adds a VIP on a port below 1024
//     fails without it (bind: permission denied);
//   - cap_sys_resource, when held: the kernel counts all of root's pipes
//     against fs.pipe-user-pages-soft unless the process has it (or
//     cap_sys_admin), then gives new splice pipes a page or two and refuses
//     F_SETPIPE_SZ: connections still flow, with more syscalls;
//   - with an [xdp] table, xdpCapabilities.
//
// Not kept: cap_net_raw (health checks use ordinary TCP, UDP and
// application sockets), cap_sys_admin in proxy mode, and everything else
// root has.
func keptCapabilities(cfg *config.Config) []cap.Value {
	keep := []cap.Value{cap.NET_BIND_SERVICE, cap.SYS_RESOURCE}
	if cfg.XDP != nil {
		keep = append(keep, xdpCapabilities...)
	}
	return keep
}

// xdpCapabilities keep the fast path working after the drop:
//   - cap_bpf: a reload that changes backends creates a new inner Maglev
//     map (map create: operation not permitted without it);
//   - cap_perfmon: a reload that moves a VIP to xdp loads the program, and
//     the verifier refuses its pointer arithmetic without it;
//   - cap_net_admin: loading an XDP program and attaching it, and the
//     neighbour entries the control plane keeps resolved;
//   - cap_sys_admin: `l4lb explain` and bpf.LB.MaglevTable open a VIP's
//     inner Maglev map by the ID the outer map holds, and
//     BPF_MAP_GET_FD_BY_ID needs it ("the XDP maps could not be read"
//     without it). Keeping the inner maps' descriptors would let it go.
var xdpCapabilities = []cap.Value{cap.BPF, cap.PERFMON, cap.NET_ADMIN, cap.SYS_ADMIN}

// dropCapabilities drops every capability the daemon does not use
// afterwards, when the config asks for it.
func (d *daemon) dropCapabilities(cfg *config.Config) error {
	if !cfg.Global.DropCapabilities {
		return nil
	}
	kept, err := privs.Drop(keptCapabilities(cfg))
	if err != nil {
		return err
	}
	names := make([]string, len(kept))
	for i, v := range kept {
		names[i] = v.String()
	}
	d.log.Info("capabilities dropped", zap.Strings("kept", names))
	d.mu.Lock()
	d.capsDropped = true
	d.mu.Unlock()
	return nil
}

// capabilityStatus says which capabilities the daemon holds now.
func (d *daemon) capabilityStatus() *plane.CapabilityStatus {
	s, err := privs.Read()
	if err != nil {
		d.log.Warn("cannot read capabilities", zap.Error(err))
		return nil
	}
	d.mu.Lock()
	dropped := d.capsDropped
	d.mu.Unlock()
	return &plane.CapabilityStatus{Dropped: dropped, Effective: s.Effective, Permitted: s.Permitted, Bounding: s.Bounding}
}
