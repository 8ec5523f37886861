// `l4lb xdp detach`: take off an XDP program that a stopped l4lb left
// attached with pinned maps.
package main

import (
	"fmt"
	"io"
	"net"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4/reconcile"
)

const xdpHelp = `With [xdp] pin_path set, a stopped l4lb leaves its XDP program attached
and its maps pinned, so that the next l4lb adopts them without dropping a
flow. "l4lb xdp detach" takes the program off the configured interface and
removes the pins, for when no l4lb will come back. It refuses while an l4lb
answers on the config's admin socket.
`

func cmdXDP(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "detach" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, commandHelp(commandNamed("xdp")))
			return 0
		}
		fmt.Fprint(stderr, commandHelp(commandNamed("xdp")))
		return 2
	}
	f := newFlags("xdp", stdout, stderr)
	configFlag := f.String("config", "", "config file (default "+defaultConfigPath+"; or give it as the argument)")
	if code, ok := f.parse(args[1:]); !ok {
		return code
	}
	path, ok := f.configPath(*configFlag)
	if !ok {
		return 2
	}
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := xdpDetach(cfg); err != nil {
		fmt.Fprintln(stderr, "l4lb xdp detach:", err)
		return 1
	}
	fmt.Fprintf(stdout, "xdp program detached from %s, pins under %s removed\n", cfg.XDP.Interface, cfg.XDP.PinPath)
	return 0
}

func xdpDetach(cfg *config.Config) error {
	if cfg.XDP == nil || cfg.XDP.PinPath == "" {
		return fmt.Errorf("%s has no [xdp] pin_path: an unpinned program goes with the l4lb that attached it", cfg.Path)
	}
	if cfg.Global.AdminSocket != "" {
		if _, err := adminGet(cfg.Global.AdminSocket, "/status"); err == nil {
			return fmt.Errorf("an l4lb is running on %s: stop it first", cfg.Global.AdminSocket)
		}
	}
	ifc, err := net.InterfaceByName(cfg.XDP.Interface)
	if err != nil {
		return fmt.Errorf("interface %q: %w", cfg.XDP.Interface, err)
	}
	lb, err := bpf.Load(reconcile.XDPLoadOptions(*cfg.XDP))
	if err != nil {
		return err
	}
	defer lb.Close()
	if err := lb.Attach(ifc.Index, reconcile.XDPAttachMode(*cfg.XDP)); err != nil { // adopts the pinned link
		return err
	}
	if err := lb.Detach(); err != nil {
		return err
	}
	return lb.Unpin()
}
