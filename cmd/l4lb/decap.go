// `l4lb decap`: the backends' side of xdp VIPs with forward = "ipip" or "gue".

package main

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/l4"
)

const decapHelp = `Backends of xdp VIPs with forward = "ipip" receive the client's packets
inside an outer IPv4 (or IPv6) header from the balancer; with forward =
"gue", inside an outer IP and UDP header to the balancer's [xdp] gue_port.
"attach" runs a small XDP program on the backend's interface that strips
either and passes the inner packet to the kernel, so no tunnel device is
needed.
The VIP goes on the backend's loopback (with arp_ignore=1, arp_announce=2,
rp_filter=0), and the backend answers the client directly.

  l4lb decap attach --iface IF [--mode driver|generic] [--gue-port N]
  l4lb decap detach --iface IF
  l4lb decap status --iface IF

On each backend:

  l4lb decap attach --iface eth0
  ip addr add 198.18.0.20/32 dev lo     # the VIP on loopback
  sysctl -w net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.all.rp_filter=0

The program stays attached after the command exits. attach is idempotent
and says what it did: attached, kept (this version ran there already),
replaced (an older version ran there) or moved to the other mode; detach
with nothing attached says so and exits 0. Another XDP program on
the interface is never replaced or removed (exit 1). status prints its
counters. --mode generic works on any interface, much slower.
--gue-port (default 6080, the balancer's default gue_port) is the UDP
port whose GUE packets are stripped, any destination address; 0 strips
only IP-in-IP. Other UDP traffic passes untouched.

With forward = "l2" backends need no decap, only the VIP on lo and the same
sysctls. MTU: IPIP adds 20 bytes (IPv6: 40); the path from the balancer to
the backends must carry a full-size client packet plus that, or the
clients' MSS must be clamped. GUE adds 8 bytes more (28, IPv6: 48).
`

func cmdDecap(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, commandHelp(commandNamed("decap")))
		return 0
	}
	verb := args[0]
	f := newFlags("decap", stdout, stderr)
	iface := f.String("iface", "", "the backend's interface")
	mode := f.String("mode", "driver", "driver (native XDP) or generic")
	guePort := f.Uint("gue-port", bpf.DefaultGUEPort, "UDP port whose GUE packets are stripped (0: none)")
	if code, ok := f.parseNoArgs(args[1:]); !ok {
		return code
	}
	if *iface == "" {
		f.usageError("--iface is required")
		return 2
	}
	ifc, err := net.InterfaceByName(*iface)
	if err != nil {
		fmt.Fprintf(stderr, "l4lb decap %s: interface %q: %v\n", verb, *iface, err)
		return 1
	}
	switch verb {
	case "attach":
		if *guePort > 65535 {
			f.usageError(fmt.Sprintf("--gue-port %d is not a port (0 to 65535)", *guePort))
			return 2
		}
		return decapAttach(ifc, *mode, uint16(*guePort), stdout, stderr)
	case "detach":
		return decapDetach(ifc, stdout, stderr)
	case "status":
		return decapStatus(ifc, stdout, stderr)
	}
	f.usageError(fmt.Sprintf("unknown verb %q (attach, detach or status)", verb))
	return 2
}

func decapAttach(ifc *net.Interface, modeName string, guePort uint16, stdout, stderr io.Writer) int {
	mode, ok := l4.ParseName[bpf.AttachMode](modeName, l4.AttachModeNames())
	if !ok {
		fmt.Fprintf(stderr, "l4lb decap attach: --mode %q is not driver or generic\n", modeName)
		return 2
	}
	d, err := bpf.AttachDecap(ifc.Index, mode)
	if err != nil {
		fmt.Fprintf(stderr, "l4lb decap attach: %s: %v%s\n", ifc.Name, err, genericHint(err, mode, "--mode generic"))
		return 1
	}
	defer d.Close()
	if err := d.SetGUEPort(guePort); err != nil {
		fmt.Fprintf(stderr, "l4lb decap attach: %s: %v\n", ifc.Name, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s; %s\n", decapAttached(ifc.Name, mode, d), guePortText(guePort))
	return 0
}

// decapAttached says what attach did to the interface.
func decapAttached(name string, mode bpf.AttachMode, d *bpf.Decap) string {
	switch did, was := d.Did(); did {
	case bpf.DecapKept:
		return fmt.Sprintf("decap already attached to %s (%s mode): kept, its counters go on", name, mode)
	case bpf.DecapReplaced:
		return fmt.Sprintf("decap on %s (%s mode) replaced by this version's", name, mode)
	case bpf.DecapModeChanged:
		return fmt.Sprintf("decap on %s moved from %s to %s mode", name, was, mode)
	}
	return fmt.Sprintf("decap attached to %s (%s mode)", name, mode)
}

// genericHint is the fix for native XDP on an interface whose driver has
// none (lo, bridges, many virtual devices): the generic mode, named by
// how the caller sets it.
func genericHint(err error, mode bpf.AttachMode, set string) string {
	if mode != bpf.AttachDriver || !errors.Is(err, bpf.ErrNotSupported) {
		return ""
	}
	return fmt.Sprintf(" (the interface's driver has no native XDP: use %s, which works on any interface at a fraction of the speed)", set)
}

func decapDetach(ifc *net.Interface, stdout, stderr io.Writer) int {
	removed, err := bpf.DetachDecap(ifc.Index)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "l4lb decap detach: %s: %v\n", ifc.Name, err)
		return 1
	case removed:
		fmt.Fprintf(stdout, "decap detached from %s\n", ifc.Name)
	default:
		fmt.Fprintf(stdout, "no decap attached to %s: nothing to do\n", ifc.Name)
	}
	return 0
}

func decapStatus(ifc *net.Interface, stdout, stderr io.Writer) int {
	d, err := bpf.OpenDecap(ifc.Index)
	if errors.Is(err, bpf.ErrNotFound) {
		fmt.Fprintf(stdout, "no decap attached to %s\n", ifc.Name)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "l4lb decap status: %s: %v\n", ifc.Name, err)
		return 1
	}
	defer d.Close()
	st, err := d.Stats()
	if err != nil {
		fmt.Fprintf(stderr, "l4lb decap status: %s: %v\n", ifc.Name, err)
		return 1
	}
	port, err := d.GUEPort()
	if err != nil {
		fmt.Fprintf(stderr, "l4lb decap status: %s: %v\n", ifc.Name, err)
		return 1
	}
	fmt.Fprintf(stdout, "decap on %s (%s): ipv4 outer %d, ipv6 outer %d, gue ipv4 outer %d, gue ipv6 outer %d, not encapsulated %d, malformed %d, failed %d\n",
		ifc.Name, guePortText(port), st.OuterV4, st.OuterV6, st.GUEV4, st.GUEV6, st.NotEncap, st.Malformed, st.Failed)
	return 0
}

// guePortText says which GUE packets the decap strips.
func guePortText(port uint16) string {
	if port == 0 {
		return "gue off"
	}
	return fmt.Sprintf("gue on udp port %d", port)
}
