// `l4lb xdp detach`: take off an XDP program that a stopped l4lb left
// attached with pinned maps.

package main

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/config"
)

const xdpHelp = `With [xdp] pin_path set, a stopped l4lb leaves its XDP program attached
and its maps pinned, so that the next l4lb adopts them without dropping a
flow. "l4lb xdp detach" takes the program off the configured interfaces and
removes the pins, for when no l4lb will come back, and prints what it
found and did: "nothing detached" when no program was pinned there. It
never mounts, loads or attaches anything. It refuses while an l4lb answers
on the config's admin socket, and fails (exit 1) when an l4lb program
stays attached.
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
	if err := xdpDetach(cfg, stdout); err != nil {
		fmt.Fprintln(stderr, "l4lb xdp detach:", err)
		return 1
	}
	return 0
}

// xdpDetach removes what a stopped l4lb left pinned under cfg's pin_path
// for its interface and prints exactly what it found and did. It fails
// when the program stays attached.
func xdpDetach(cfg *config.Config, stdout io.Writer) error {
	if cfg.XDP == nil || cfg.XDP.PinPath == "" {
		return fmt.Errorf("%s has no [xdp] pin_path: an unpinned program goes with the l4lb that attached it", cfg.Path)
	}
	if cfg.Global.AdminSocket != "" {
		if _, err := adminGet(cfg.Global.AdminSocket, "/status"); err == nil {
			return fmt.Errorf("an l4lb is running on %s: stop it first", cfg.Global.AdminSocket)
		}
	}
	var errs []error
	for _, ifname := range cfg.XDP.Interfaces {
		errs = append(errs, xdpDetachFrom(ifname, cfg.XDP.PinPath, stdout))
	}
	return errors.Join(errs...)
}

// xdpDetachFrom is xdpDetach for one of the interfaces.
func xdpDetachFrom(ifname, root string, stdout io.Writer) error {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("interface %q: %w", ifname, err)
	}
	u, err := bpf.DetachPinned(root, ifc.Index)
	for _, d := range u.Dirs {
		fmt.Fprintf(stdout, "removed %s and the %d pins in it\n", d.Path, d.Pins)
	}
	for _, dir := range u.Kept {
		fmt.Fprintf(stdout, "kept %s: it pins the XDP link of another interface\n", dir)
	}
	if err != nil {
		return err
	}
	return reportDetach(u, ifname, root, stdout)
}

// reportDetach says whether the interface still runs a program, and fails
// when l4lb's does.
func reportDetach(u bpf.Unpinned, ifname, root string, stdout io.Writer) error {
	switch {
	case u.Detached():
		fmt.Fprintf(stdout, "xdp program detached from %s\n", ifname)
	case len(u.LinkPins) > 0:
		return fmt.Errorf("unpinned the XDP link on %s, but xdp_lb (program %d) is still attached: another process holds its link (an l4lb still running?)", ifname, u.AttachedID)
	case bpf.IsBalancer(u.Attached):
		return fmt.Errorf("%s runs xdp_lb (program %d), but no pin under %s holds it: the l4lb that attached it still runs (stop that one)", ifname, u.AttachedID, root)
	default:
		fmt.Fprintf(stdout, "no l4lb XDP program pinned under %s for %s: nothing detached\n", root, ifname)
	}
	if u.Attached != "" && !bpf.IsBalancer(u.Attached) {
		fmt.Fprintf(stdout, "%s runs another XDP program (%q, program %d): left alone\n", ifname, u.Attached, u.AttachedID)
	}
	if len(u.Dirs) == 0 && len(u.Kept) == 0 {
		fmt.Fprintf(stdout, "no l4lb pins under %s\n", root)
	}
	return nil
}
